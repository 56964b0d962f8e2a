//! A body answered with a strong ETag of its bytes: the same bytes carry the same tag on every
//! replica and every build, so a client (or a cache in front of the gateway) that holds them is
//! answered `304` without the body. The API document and its page, and the storefront's pages
//! and assets, are served through it.

use actix_web::HttpRequest;
use actix_web::http::header::{HeaderValue, IF_NONE_MATCH};
use actix_web::web::Bytes;
use aws_lc_rs::digest::{SHA256, digest};

#[derive(Debug, Clone)]
pub struct Tagged {
    body: Bytes,
    /// The first 16 bytes of the body's SHA-256, in hex.
    hash: String,
    etag: HeaderValue,
}

impl Tagged {
    pub fn new(body: Bytes) -> Self {
        let hash: String = digest(&SHA256, &body).as_ref()[..16].iter().map(|b| format!("{b:02x}")).collect();
        let etag = HeaderValue::from_str(&format!("\"{hash}\"")).expect("hex digits in quotes");
        Self { body, hash, etag }
    }

    pub fn body(&self) -> &Bytes {
        &self.body
    }

    pub fn etag(&self) -> &HeaderValue {
        &self.etag
    }

    /// The body's hash, for an asset's URL (`?v=`): a new body is a new URL.
    pub fn version(&self) -> &str {
        &self.hash
    }

    /// Whether `req`'s `If-None-Match` names this body: `*`, or a list of tags compared weakly
    /// (a `W/` prefix ignored), as RFC 9110 has it for a GET.
    pub fn held_by(&self, req: &HttpRequest) -> bool {
        req.headers().get_all(IF_NONE_MATCH).filter_map(|v| v.to_str().ok()).any(|v| self.named_in(v))
    }

    fn named_in(&self, if_none_match: &str) -> bool {
        let etag = self.etag.as_bytes();
        if_none_match
            .split(',')
            .map(str::trim)
            .any(|tag| tag == "*" || tag.trim_start_matches("W/").as_bytes() == etag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_bytes_carry_the_same_tag_and_others_another() {
        let (a, b) = (Tagged::new(Bytes::from_static(b"page")), Tagged::new(Bytes::from_static(b"page")));
        assert_eq!((a.etag(), a.version()), (b.etag(), b.version()));
        assert_ne!(a.etag(), Tagged::new(Bytes::from_static(b"page!")).etag());
        // SHA-256 of "page", its first 16 bytes: the tag does not depend on this build.
        assert_eq!(a.version(), "3660315a9af3df255d8f19ab077e4797");
        assert_eq!(a.etag(), "\"3660315a9af3df255d8f19ab077e4797\"");
    }

    #[test]
    fn if_none_match_names_the_tag_weakly_in_a_list_or_as_a_star() {
        let t = Tagged::new(Bytes::from_static(b"abc"));
        let tag = t.etag().to_str().unwrap().to_owned();
        assert!(t.named_in(&tag));
        assert!(t.named_in(&format!("W/{tag}")));
        assert!(t.named_in(&format!("\"x\", {tag}")));
        assert!(t.named_in("*"));
        assert!(!t.named_in("\"abd\""));
        assert!(!t.named_in(t.version()), "a tag is quoted");
        assert!(!t.named_in(""));
    }
}
