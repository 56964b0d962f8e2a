//! One headless Chromium for one test: its own ChromeDriver (a child process on a port of its
//! own, killed with the browser when the test ends, passed or not), its own profile directory,
//! and the few things a test does on a page.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::json;

const WIDTH: u32 = 1280;
const HEIGHT: u32 = 900;
/// How long a page may take to show what a test waits for, on a loaded two-core CI machine.
pub const PATIENCE: Duration = Duration::from_secs(20);

fn env_on(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A path from `var`, else `default`.
fn binary(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).filter(|v| !v.is_empty()).map_or_else(|| default.into(), PathBuf::from)
}

/// ChromeDriver and the browsers it started, as one process group: dropped, all of it is
/// killed (a test that fails never closes its session, and a Chromium left behind would hold
/// the test runner's output open).
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    /// A ChromeDriver that said its port; a second one if the first stays silent (on a loaded
    /// machine one in some hundreds never prints it, and a test should not fail for that).
    fn start(path: &Path) -> Self {
        Self::try_start(path).unwrap_or_else(|| {
            Self::try_start(path).unwrap_or_else(|| {
                panic!("ChromeDriver ({}) did not say its port within 20 s, twice", path.display())
            })
        })
    }

    fn try_start(path: &Path) -> Option<Self> {
        use std::os::unix::process::CommandExt;
        // --port=0: ChromeDriver takes a free port and prints it; no race with other tests.
        let mut child = Command::new(path)
            .arg("--port=0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start ChromeDriver at {}: {e}", path.display()));
        let stdout = child.stdout.take().expect("ChromeDriver's stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        // Reads the port, then drains what else it prints until it ends.
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line
                    .split_once("started successfully on port ")
                    .and_then(|(_, rest)| rest.trim_end_matches('.').trim().parse::<u16>().ok())
                {
                    let _ = tx.send(port);
                }
            }
        });
        // Made before the port is known, so that a ChromeDriver that never says it is killed too
        // (dropped here).
        let mut driver = Self { child, port: 0 };
        driver.port = rx.recv_timeout(Duration::from_secs(20)).ok()?;
        Some(driver)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The whole group: ChromeDriver and every Chromium process under it.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.child.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A browser session. Fields drop in order: the session's client, then the processes, then
/// the profile directory they used.
pub struct Browser {
    client: Client,
    _driver: Driver,
    _profile: Profile,
}

struct Profile(PathBuf);

impl Drop for Profile {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh headless Chromium and what `system` starts (the whole system), side by side: each
/// takes a second or two. None when `SECKILL_SKIP_BROWSER_TESTS` is set (then nothing starts).
/// Fails the test at once when ChromeDriver or Chromium is missing.
pub async fn start<T: Send + 'static>(
    test: &str,
    system: impl FnOnce() -> T + Send + 'static,
) -> Option<(Browser, T)> {
    if env_on("SECKILL_SKIP_BROWSER_TESTS") {
        eprintln!("{test}: skipped (SECKILL_SKIP_BROWSER_TESTS is set)");
        return None;
    }
    let driver = binary("SECKILL_CHROMEDRIVER", "/usr/bin/chromedriver");
    let chromium = binary("SECKILL_CHROMIUM", "/usr/bin/chromium");
    for (what, path, var) in
        [("ChromeDriver", &driver, "SECKILL_CHROMEDRIVER"), ("Chromium", &chromium, "SECKILL_CHROMIUM")]
    {
        assert!(
            path.is_file(),
            "no {what} at {} ({var}): run scripts/test.sh, which installs Debian's chromium and \
             chromium-driver, or set SECKILL_CHROMEDRIVER and SECKILL_CHROMIUM, or \
             SECKILL_SKIP_BROWSER_TESTS=1 to skip the browser tests",
            path.display()
        );
    }
    let (browser, system) =
        tokio::join!(Browser::start(&driver, &chromium), tokio::task::spawn_blocking(system));
    Some((browser, system.expect("the system starts")))
}

impl Browser {
    async fn start(driver_path: &Path, chromium: &Path) -> Self {
        let profile = Profile(std::env::temp_dir().join(format!("seckill-browser-{}", uuid::Uuid::new_v4())));
        let driver = Driver::start(driver_path);
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    format!("--window-size={WIDTH},{HEIGHT}"), "--hide-scrollbars",
                    "--force-device-scale-factor=1", "--lang=en-US", "--no-first-run",
                    format!("--user-data-dir={}", profile.0.display()),
                ],
            }),
        );
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
            .unwrap_or_else(|e| panic!("no browser session from ChromeDriver ({}): {e}", chromium.display()));
        // The window's frame takes some of its height even headless: grow the window until
        // the page itself (what a screenshot shows) is WIDTH x HEIGHT.
        let inner = client.execute("return [window.innerWidth, window.innerHeight];", vec![]).await;
        let inner: (u32, u32) = serde_json::from_value(inner.expect("the page's size")).expect("two numbers");
        client
            .set_window_size(2 * WIDTH - inner.0, 2 * HEIGHT - inner.1)
            .await
            .unwrap_or_else(|e| panic!("resize the window: {e}"));
        Self { client, _driver: driver, _profile: profile }
    }

    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    async fn element(&self, id: &str) -> fantoccini::elements::Element {
        self.client.find(Locator::Id(id)).await.unwrap_or_else(|e| panic!("#{id}: {e}"))
    }

    /// The text a user sees in element `id` (empty when it is hidden).
    pub async fn text(&self, id: &str) -> String {
        self.element(id).await.text().await.unwrap_or_else(|e| panic!("text of #{id}: {e}"))
    }

    pub async fn enabled(&self, id: &str) -> bool {
        self.element(id).await.is_enabled().await.unwrap_or_else(|e| panic!("#{id} enabled: {e}"))
    }

    pub async fn displayed(&self, id: &str) -> bool {
        self.element(id).await.is_displayed().await.unwrap_or_else(|e| panic!("#{id} displayed: {e}"))
    }

    pub async fn click(&self, id: &str) {
        self.element(id).await.click().await.unwrap_or_else(|e| panic!("click #{id}: {e}"));
    }

    /// Types `text` into the field `locator` finds, after clearing it.
    pub async fn fill(&self, locator: Locator<'_>, text: &str) {
        let field = self.client.find(locator).await.unwrap_or_else(|e| panic!("{locator:?}: {e}"));
        field.clear().await.unwrap_or_else(|e| panic!("clear {locator:?}: {e}"));
        field.send_keys(text).await.unwrap_or_else(|e| panic!("type into {locator:?}: {e}"));
    }

    /// Waits until `check` holds for element `id`'s text (polling every 50 ms) and returns the
    /// text, or panics with the last one after `within`.
    pub async fn wait_text(&self, id: &str, within: Duration, check: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + within;
        loop {
            let text = self.text(id).await;
            if check(&text) {
                return text;
            }
            assert!(Instant::now() < deadline, "#{id} still shows {text:?} after {within:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until element `id`'s text is `expected`.
    pub async fn wait_for_text(&self, id: &str, expected: &str) {
        self.wait_text(id, PATIENCE, |t| t == expected).await;
    }

    /// Waits until `check` on the page holds (polling every 50 ms), or panics naming `what`.
    pub async fn wait_until<F, Fut>(&self, what: &str, check: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        seckill_e2e::eventually(what, PATIENCE, Duration::from_millis(50), check).await;
    }

    /// Signs in with the header's form, as a buyer does with dev tokens on.
    pub async fn sign_in(&self, user: i64) {
        self.fill(Locator::Id("signin-user"), &user.to_string()).await;
        self.click("signin-button").await;
        self.wait_for_text("who", &format!("Signed in as user {user}")).await;
    }

    /// Records every text element `id` shows from now on (a state may last only a second).
    /// Several elements may be recorded at once, each on its own.
    pub async fn record_texts(&self, id: &str) {
        self.client
            .execute(
                "const id = arguments[0], el = document.getElementById(id);
                 const seen = window.seckillSeen = window.seckillSeen || {};
                 seen[id] = [];
                 new MutationObserver(() => seen[id].push(el.textContent))
                     .observe(el, { childList: true, characterData: true, subtree: true });",
                vec![json!(id)],
            )
            .await
            .unwrap_or_else(|e| panic!("watch #{id}: {e}"));
    }

    /// The texts element `id` showed since `record_texts(id)`.
    pub async fn recorded_texts(&self, id: &str) -> Vec<String> {
        let seen = self
            .client
            .execute("return (window.seckillSeen || {})[arguments[0]] || [];", vec![json!(id)])
            .await
            .unwrap_or_else(|e| panic!("texts recorded of #{id}: {e}"));
        serde_json::from_value(seen).expect("a list of texts")
    }

    /// Records every request the page makes with `fetch` from now on, as `<METHOD> <url>`.
    pub async fn record_fetches(&self) {
        self.client
            .execute(
                "const fetch = window.fetch;
                 window.seckillFetched = [];
                 window.fetch = function (url, options) {
                     window.seckillFetched.push(((options && options.method) || 'GET') + ' ' + url);
                     return fetch.apply(this, arguments);
                 };",
                vec![],
            )
            .await
            .unwrap_or_else(|e| panic!("watch the page's requests: {e}"));
    }

    /// The requests the page made since `record_fetches`.
    pub async fn fetched(&self) -> Vec<String> {
        let seen = self
            .client
            .execute("return window.seckillFetched || [];", vec![])
            .await
            .unwrap_or_else(|e| panic!("the page's requests: {e}"));
        serde_json::from_value(seen).expect("a list of URLs")
    }

    /// Saves what the browser shows as docs/screenshots/`name`.png when SECKILL_SCREENSHOTS is
    /// set (the README's pictures), else nothing.
    pub async fn screenshot(&self, name: &str) {
        if !env_on("SECKILL_SCREENSHOTS") {
            return;
        }
        let png = self.client.screenshot().await.unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots");
        std::fs::create_dir_all(&dir).expect("docs/screenshots");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// Ends the session (the browser quits); what is left is killed on drop.
    pub async fn close(self) {
        let _ = self.client.clone().close().await;
    }
}
