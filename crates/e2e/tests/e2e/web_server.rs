//! The storefront's files served by a web server in front of the gateway, as deploy/compose.yaml
//! and the Kubernetes component storefront-nginx run it: Debian's nginx (which scripts/test.sh
//! installs when it is missing) with the very file both use,
//! deploy/k8s/components/storefront-nginx/nginx.conf, pointed at this test's gateway and
//! storefront.dir.
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
    /// test: its port, the files' directory, the gateway's address and where nginx writes.
    fn start(binary: &Path, work: &Path, pages: &Path, gateway_port: u16) -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut config = std::fs::read_to_string(root.join(CONFIG)).expect("the nginx.conf of deploy/");
        // A free port now; nginx binds it a moment later (another process taking it in between
        // would fail the start, loudly).
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        for (from, to) in [
            ("listen 8088;", format!("listen 127.0.0.1:{port};")),
            ("root /srv/storefront;", format!("root {};", pages.display())),
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

#[tokio::test]
async fn nginx_serves_the_pages_from_the_files_and_passes_the_rest_to_the_gateway() {
    let Some(binary) = nginx_binary() else { return };
    let work = TempDir(std::env::temp_dir().join(format!("seckill-nginx-{}", unique_tag())));
    let pages = work.0.join("storefront");
    let limits = RateLimitSettings {
        anonymous: LimitSettings { per_sec: Some(1), burst: Some(ANONYMOUS_BURST) },
        // nginx is the one proxy: the address it appends is the client's.
        trusted_proxy_hops: 1,
        ..RateLimitSettings::default()
    };
    let mut sys = spawn_system_with(Options {
        storefront_dir: Some(pages.clone()),
        rate_limits: Some(limits),
        ..Options::default()
    });
    let gateway = sys.gateway.url();
    let nginx = Nginx::start(&binary, &work.0, &pages, sys.gateway.port);
    let http = sys.http.clone();
    seckill_e2e::eventually("nginx answers", Duration::from_secs(10), Duration::from_millis(50), || {
        let req = http.get(format!("{}/static/store.css", nginx.url()));
        async move { req.send().await.is_ok_and(|r| r.status() == StatusCode::OK) }
    })
    .await;
    sys.serve_through(nginx.url());

    // The API through nginx: an admin creates a sale, a buyer buys it and pays.
    let sale = sys.open_sale(1).await;
    let buyer = sys.dev_token(71, "user").await;
    let order = sys.buy_order(&buyer, sale.id).await;
    let (status, body) = sys.pay(&buyer, order).await;
    assert_eq!(status, 200, "{body}");

    // A sale's page nginx has no file for yet is the gateway's, which writes the file.
    let sale_file = pages.join(format!("sales/{}.html", sale.id));
    let _ = std::fs::remove_file(&sale_file);
    let page = http.get(format!("{}/sales/{}", nginx.url(), sale.id)).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let served = page.bytes().await.unwrap();
    assert_eq!(std::fs::read(&sale_file).expect("the gateway wrote the page"), served);

    // From then on nginx serves the file, with the gateway's own headers for it.
    for path in ["/".to_owned(), "/ended".to_owned(), format!("/sales/{}", sale.id), "/admin".to_owned()] {
        let direct = http.get(format!("{gateway}{path}")).send().await.unwrap();
        let front = http.get(format!("{}{path}", nginx.url())).send().await.unwrap();
        assert_eq!(front.status(), StatusCode::OK, "{path}");
        for name in [CACHE_CONTROL, CONTENT_SECURITY_POLICY] {
            assert_eq!(front.headers().get(&name), direct.headers().get(&name), "{path}: {name}");
        }
        let content_type = front.headers()[CONTENT_TYPE].to_str().unwrap().to_owned();
        assert_eq!(content_type, "text/html; charset=utf-8", "{path}");
        let etag = front.headers()[ETAG].clone();
        assert_eq!(front.bytes().await.unwrap(), direct.bytes().await.unwrap(), "{path}: the same page");
        let again =
            http.get(format!("{}{path}", nginx.url())).header(IF_NONE_MATCH, etag).send().await.unwrap();
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}: a browser's copy is still good");
    }
    // A list's later page is the gateway's, never the first page's file: a cursor the shop
    // never gave is its 404 page, where the file would have been a 200.
    for path in ["/?cursor=bm9wZQ", "/ended?cursor=bm9wZQ"] {
        let front = http.get(format!("{}{path}", nginx.url())).send().await.unwrap();
        assert_eq!(front.status(), StatusCode::NOT_FOUND, "{path}");
    }
    for asset in ["/static/store.js", "/static/store.css", "/static/admin.js"] {
        let direct = http.get(format!("{gateway}{asset}")).send().await.unwrap();
        let front = http.get(format!("{}{asset}", nginx.url())).send().await.unwrap();
        assert_eq!(front.status(), StatusCode::OK, "{asset}");
        assert_eq!(front.headers().get(CACHE_CONTROL), direct.headers().get(CACHE_CONTROL), "{asset}");
        let (front_type, direct_type) =
            (front.headers()[CONTENT_TYPE].clone(), direct.headers()[CONTENT_TYPE].clone());
        assert_eq!(front_type, direct_type, "{asset}");
        assert_eq!(front.bytes().await.unwrap(), direct.bytes().await.unwrap(), "{asset}");
    }
    // Served from the directory, not asked of the gateway: a file only the directory has.
    std::fs::write(pages.join("static/only-on-disk.css"), "p{}").unwrap();
    let on_disk = http.get(format!("{}/static/only-on-disk.css", nginx.url())).send().await.unwrap();
    assert_eq!((on_disk.status(), on_disk.text().await.unwrap().as_str()), (StatusCode::OK, "p{}"));
    let at_gateway = http.get(format!("{gateway}/static/only-on-disk.css")).send().await.unwrap();
    assert_eq!(at_gateway.status(), StatusCode::NOT_FOUND);

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
