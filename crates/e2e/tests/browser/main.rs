//! The storefront in a real browser: headless Chromium driven through ChromeDriver (Debian's
//! `chromium` and `chromium-driver`, which scripts/test.sh installs when they are missing)
//! against the whole system in-process, as in tests/e2e. Each test has its own ChromeDriver,
//! browser and system, and asserts on what a buyer or an admin sees on the page.
//!
//! - `SECKILL_CHROMEDRIVER`, `SECKILL_CHROMIUM`: the binaries (default `/usr/bin/chromedriver`
//!   and `/usr/bin/chromium`). Without a ChromeDriver the tests fail, naming scripts/test.sh.
//! - `SECKILL_SKIP_BROWSER_TESTS=1`: each test passes at once, saying it skipped (a machine
//!   that cannot have Chromium).
//! - `SECKILL_SCREENSHOTS=1`: the tests also save the README's screenshots in
//!   docs/screenshots/ (off by default, so a normal run leaves the committed files alone).

mod admin;
mod broker_down;
mod browser;
mod buy;
mod room;
mod sold_out;
