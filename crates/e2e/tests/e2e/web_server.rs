//! The storefront's pages cached by a web server in front of the gateway, as deploy/compose.yaml
//! and the Kubernetes component storefront-nginx run it: Debian's nginx (which scripts/test.sh
//! installs when it is missing) with the very file both use,
//! deploy/k8s/components/storefront-nginx/nginx.conf, pointed at this test's gateway.
//!
//! - `SECKILL_NGINX`: the binary (default `/usr/sbin/nginx`). Without it the test fails,
//!   naming scripts/test.sh.
//! - `SECKILL_SKIP_WEB_SERVER_TEST=1`: the test passes at once, saying it skipped.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gateway::configuration::{LimitSettings, RateLimitSettings};
use reqwest::StatusCode;
use reqwest::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use seckill_e2e::{Options, spawn_system_with};
use seckill_testkit::unique_tag;

const CONFIG: &str = "deploy/k8s/components/storefront-nginx/nginx.conf";
/// The anonymous limit of this test's gateway: small, so a flood meets it.
const ANONYMOUS_BURST: u32 = 10;

/// A directory of this test's own, removed at the end.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// nginx in one process (no master, no daemon): dropped, it is killed.
struct Nginx {
    child: Child,
    port: u16,
}

impl Nginx {
    /// Runs the deployments' nginx.conf with what is the deployments' own rewritten for this
    /// test: its port, the gateway's address and where nginx writes (its cache too).
    fn start(binary: &Path, work: &Path, gateway_port: u16) -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut config = std::fs::read_to_string(root.join(CONFIG)).expect("the nginx.conf of deploy/");
        // A free port now; nginx binds it a moment later (another process taking it in between
        // would fail the start, loudly).
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        for (from, to) in [
            ("listen 8088;", format!("listen 127.0.0.1:{port};")),
            ("server gateway:8080;", format!("server 127.0.0.1:{gateway_port};")),
            ("/tmp/nginx", format!("{}/nginx", work.display())),
        ] {
            assert!(config.contains(from), "{CONFIG} no longer has `{from}`, which this test rewrites");
            config = config.replace(from, &to);
        }
        let conf = work.join("nginx.conf");
        std::fs::write(&conf, config).unwrap();
        let child = Command::new(binary)
            .arg("-e")
            .arg("stderr")
            .arg("-p")
            .arg(work)
            .arg("-c")
            .arg(&conf)
            .args(["-g", "daemon off; master_process off;"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start nginx at {}: {e}", binary.display()));
        Self { child, port }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_binary() -> Option<PathBuf> {
    if std::env::var("SECKILL_SKIP_WEB_SERVER_TEST").is_ok_and(|v| !v.is_empty() && v != "0") {
        eprintln!("web_server: skipped (SECKILL_SKIP_WEB_SERVER_TEST is set)");
        return None;
    }
    let binary = std::env::var_os("SECKILL_NGINX")
        .filter(|v| !v.is_empty())
        .map_or_else(|| "/usr/sbin/nginx".into(), PathBuf::from);
    assert!(
        binary.is_file(),
        "no nginx at {} (SECKILL_NGINX): run scripts/test.sh, which installs Debian's nginx-light, or set \
         SECKILL_NGINX, or SECKILL_SKIP_WEB_SERVER_TEST=1 to skip this test",
        binary.display()
    );
    Some(binary)
}

/// What nginx said of an answer: `HIT` from its cache, `MISS` asked of the gateway and kept,
/// nothing when the answer was not one nginx caches.
fn cache_status(res: &reqwest::Response) -> String {
    res.headers().get("x-cache-status").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

#[tokio::test]
async fn nginx_keeps_the_pages_the_gateway_renders_and_passes_the_rest_to_it() {
    let Some(binary) = nginx_binary() else { return };
    let work = TempDir(std::env::temp_dir().join(format!("seckill-nginx-{}", unique_tag())));
    std::fs::create_dir_all(&work.0).unwrap();
    let limits = RateLimitSettings {
        anonymous: LimitSettings { per_sec: Some(1), burst: Some(ANONYMOUS_BURST) },
        // nginx is the one proxy: the address it appends is the client's.
        trusted_proxy_hops: 1,
        ..RateLimitSettings::default()
    };
    let mut sys = spawn_system_with(Options { rate_limits: Some(limits), ..Options::default() });
    let gateway = sys.gateway.url();
    let nginx = Nginx::start(&binary, &work.0, sys.gateway.port);
    let http = sys.http.clone();
    seckill_e2e::eventually("nginx answers", Duration::from_secs(10), Duration::from_millis(50), || {
        let req = http.get(format!("{}/static/store.css", nginx.url()));
        async move { req.send().await.is_ok_and(|r| r.status() == StatusCode::OK) }
    })
    .await;
    sys.serve_through(nginx.url());

    // The API through nginx, never kept: an admin creates a sale, a buyer buys it and pays.
    let sale = sys.open_sale(1).await;
    let buyer = sys.dev_token(71, "user").await;
    let order = sys.buy_order(&buyer, sale.id).await;
    let (status, body) = sys.pay(&buyer, order).await;
    assert_eq!(status, 200, "{body}");
    let goods = http.get(format!("{}/api/goods/{}", nginx.url(), sale.id)).send().await.unwrap();
    assert_eq!((goods.status(), cache_status(&goods)), (StatusCode::OK, String::new()));

    // Each page through nginx is the gateway's, with its headers; asked for again, nginx
    // answers it from its cache, and a browser's copy is still good.
    let pages = ["/".to_owned(), "/ended".to_owned(), format!("/sales/{}", sale.id), "/admin".to_owned()];
    let assets = ["/static/store.js", "/static/store.css", "/static/admin.js"].map(str::to_owned);
    for path in pages.iter().chain(&assets) {
        let direct = http.get(format!("{gateway}{path}")).send().await.unwrap();
        let front = http.get(format!("{}{path}", nginx.url())).send().await.unwrap();
        assert_eq!(front.status(), StatusCode::OK, "{path}");
        for name in [CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG] {
            assert_eq!(front.headers().get(&name), direct.headers().get(&name), "{path}: {name}");
        }
        let etag = front.headers()[ETAG].clone();
        assert_eq!(front.bytes().await.unwrap(), direct.bytes().await.unwrap(), "{path}: the same body");
        let again = http.get(format!("{}{path}", nginx.url())).send().await.unwrap();
        assert_eq!((again.status(), cache_status(&again)), (StatusCode::OK, "HIT".to_owned()), "{path}");
        let held =
            http.get(format!("{}{path}", nginx.url())).header(IF_NONE_MATCH, etag).send().await.unwrap();
        assert_eq!(held.status(), StatusCode::NOT_MODIFIED, "{path}: a browser's copy is still good");
    }
    // What the gateway says not to keep is asked of it each time: a sale that does not exist, a
    // list's later page it refuses (its 404 page, not the first page from the cache).
    // (A cursor costs the gateway a read, limited per address: once each, so the flood below
    // starts with most of the burst left.)
    for path in ["/sales/987654321", "/sales/987654321", "/?cursor=bm9wZQ", "/ended?cursor=bm9wZQ"] {
        let front = http.get(format!("{}{path}", nginx.url())).send().await.unwrap();
        assert_eq!(front.status(), StatusCode::NOT_FOUND, "{path}");
        assert_ne!(cache_status(&front), "HIT", "{path}: a 404 was kept");
    }

    // Behind nginx the anonymous limit counts the address nginx saw, whatever a client writes in
    // X-Forwarded-For itself: a flood that names a new address on every request still meets it.
    let mut refused = 0;
    for i in 0..ANONYMOUS_BURST + 5 {
        let res = http
            .get(format!("{}/api/goods", nginx.url()))
            .header("x-forwarded-for", format!("203.0.113.{i}"))
            .send()
            .await
            .unwrap();
        match res.status() {
            StatusCode::OK => {}
            StatusCode::TOO_MANY_REQUESTS => {
                let body: serde_json::Value = res.json().await.unwrap();
                assert_eq!(body["code"], "RATE_LIMITED", "{body}");
                refused += 1;
            }
            other => panic!("GET /api/goods through nginx: {other}"),
        }
    }
    assert!(refused > 0, "a flood with forged X-Forwarded-For was never limited");
    // Which is why only nginx's port is published: at the gateway's own port, with one hop
    // trusted, each forged address would be a bucket of its own.
    for i in 0..3 {
        let res = http
            .get(format!("{gateway}/api/goods"))
            .header("x-forwarded-for", format!("198.51.100.{i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK, "the gateway believes the last X-Forwarded-For entry");
    }
}
