//! Serving the document and its reference page: each built once, kept in memory with an
//! ETag, and answered with its caching rule (and the page with its Content-Security-Policy).

use std::sync::{Arc, OnceLock};

use actix_web::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, ETAG, HeaderValue, X_CONTENT_TYPE_OPTIONS,
};
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use aws_lc_rs::digest::{SHA256, digest};
use base64::Engine;

use crate::tagged::Tagged;

use super::api_document;

/// The reference page: one file, no resource from anywhere else.
const PAGE: &str = include_str!("../../assets/docs.html");

/// What `GET /api/openapi.json` and `GET /api/docs` answer, built once.
pub struct Published {
    document: Asset,
    page: Asset,
}

struct Asset {
    body: Tagged,
    content_type: &'static str,
    /// The page's policy: nothing but its own inline script and style, and fetches to its origin.
    policy: Option<HeaderValue>,
}

/// Clients keep a copy but ask again each time: a 304 costs no body, and a new gateway
/// version is seen at once.
const CACHE: &str = "public, no-cache";

/// The document and page for a gateway with or without dev tokens, built on the first call.
pub fn published(dev_tokens: bool) -> Arc<Published> {
    static WITH_DEV_TOKENS: OnceLock<Arc<Published>> = OnceLock::new();
    static WITHOUT: OnceLock<Arc<Published>> = OnceLock::new();
    let cell = if dev_tokens { &WITH_DEV_TOKENS } else { &WITHOUT };
    cell.get_or_init(|| Arc::new(Published::build(dev_tokens))).clone()
}

impl Published {
    fn build(dev_tokens: bool) -> Self {
        // Maps of strings and numbers: serializing cannot fail.
        let json = serde_json::to_vec(&api_document(dev_tokens)).expect("the OpenAPI document serializes");
        Self {
            document: Asset::new(Bytes::from(json), "application/json", None),
            page: Asset::new(
                Bytes::from_static(PAGE.as_bytes()),
                "text/html; charset=utf-8",
                Some(page_policy(PAGE)),
            ),
        }
    }
}

impl Asset {
    fn new(body: Bytes, content_type: &'static str, policy: Option<String>) -> Self {
        Self {
            body: Tagged::new(body),
            content_type,
            policy: policy.and_then(|p| HeaderValue::from_str(&p).ok()),
        }
    }

    fn answer(&self, req: &HttpRequest) -> HttpResponse {
        let unchanged = self.body.held_by(req);
        let mut res = if unchanged { HttpResponse::NotModified() } else { HttpResponse::Ok() };
        res.insert_header((ETAG, self.body.etag().clone())).insert_header((CACHE_CONTROL, CACHE));
        if unchanged {
            return res.finish();
        }
        res.insert_header((X_CONTENT_TYPE_OPTIONS, "nosniff"));
        if let Some(policy) = &self.policy {
            res.insert_header((CONTENT_SECURITY_POLICY, policy.clone()));
        }
        res.content_type(self.content_type).body(self.body.body().clone())
    }
}

/// The page's Content-Security-Policy: its one inline `<script>` and `<style>` allowed by their
/// hashes, fetches to its own origin only, nothing else from anywhere.
fn page_policy(html: &str) -> String {
    let hash = |tag: &str| {
        let source = inline(html, tag).unwrap_or_default();
        base64::engine::general_purpose::STANDARD.encode(digest(&SHA256, source.as_bytes()))
    };
    format!(
        "default-src 'none'; script-src 'sha256-{}'; style-src 'sha256-{}'; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        hash("script"),
        hash("style")
    )
}

/// The text of the first `<tag>...</tag>` (written without attributes).
fn inline<'a>(html: &'a str, tag: &str) -> Option<&'a str> {
    let open = format!("<{tag}>");
    let start = html.find(&open)? + open.len();
    let end = start + html[start..].find(&format!("</{tag}>"))?;
    Some(&html[start..end])
}

/// `GET /api/openapi.json`.
pub(crate) async fn document(req: HttpRequest, published: web::Data<Published>) -> HttpResponse {
    published.document.answer(&req)
}

/// `GET /api/docs`.
pub(crate) async fn page(req: HttpRequest, published: web::Data<Published>) -> HttpResponse {
    published.page.answer(&req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_policy_allows_exactly_its_own_script_and_style() {
        let script = inline(PAGE, "script").expect("the page has an inline <script>");
        let style = inline(PAGE, "style").expect("the page has an inline <style>");
        assert!(script.len() > 1000 && style.len() > 100);
        let policy = page_policy(PAGE);
        let hash = |s: &str| base64::engine::general_purpose::STANDARD.encode(digest(&SHA256, s.as_bytes()));
        assert!(policy.contains(&format!("script-src 'sha256-{}'", hash(script))), "{policy}");
        assert!(policy.contains(&format!("style-src 'sha256-{}'", hash(style))), "{policy}");
        // A second script or style, or attributes on them, would not be covered by the hashes.
        assert_eq!(PAGE.matches("<script").count(), 1);
        assert_eq!(PAGE.matches("<style").count(), 1);
        assert!(!PAGE.contains(" style="), "inline style attributes are refused by the policy");
    }
}
