//! The API against its own document: schemathesis (PyPI) reads `GET /api/openapi.json`,
//! generates requests from it (valid and invalid ones, then sequences that use what earlier
//! answers returned) and sends them to the whole system, in process, once with a buyer's token
//! and once with an admin's. It fails on any 5xx, and on any answer the document does not
//! describe: its status, content type, headers or body. What it checks, and why a few checks are
//! tuned: `api_check.toml` beside this file.
//!
//! schemathesis is `$SECKILL_SCHEMATHESIS` (scripts/test.sh installs it in a venv and exports
//! it), else `schemathesis` on the PATH; without either the test fails, unless
//! `SECKILL_SKIP_API_CHECK=1`. `SECKILL_API_CHECK_SEED=<n>` tries another seed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gateway::configuration::{LimitSettings, RateLimitSettings};
use seckill_e2e::{Options, System, spawn_system_with};

/// Test cases per operation and phase: about 2,500 a run, 45 to 55 s on two cores alone and
/// over 100 s while the rest of the suite runs beside it.
const MAX_EXAMPLES: u32 = 100;
/// The seed of the runs: the same requests each time (give or take how the two runs
/// interleave). One whose admin run publishes many sales (about 70, extreme prices among them):
/// seeds that publish few found less.
const SEED: u64 = 8;
/// A run that takes longer is stopped and fails the test (before nextest's 5 minutes for this
/// test do, .config/nextest.toml): a hang, not a slow machine.
const RUN_LIMIT: Duration = Duration::from_secs(240);

#[tokio::test]
async fn every_answer_matches_the_document_and_none_is_a_5xx() {
    if std::env::var("SECKILL_SKIP_API_CHECK").is_ok_and(|v| !v.is_empty() && v != "0") {
        eprintln!("SECKILL_SKIP_API_CHECK is set: the API check against the document is skipped");
        return;
    }
    let schemathesis = schemathesis();
    let seed = std::env::var("SECKILL_API_CHECK_SEED")
        .map(|s| s.parse().expect("SECKILL_API_CHECK_SEED is a number"))
        .unwrap_or(SEED);

    // Thousands of requests from one address and two users in seconds: the limits are real
    // behaviour (documented 429s), but here they would answer most requests before the route.
    let wide = LimitSettings { per_sec: Some(1_000_000), burst: Some(1_000_000) };
    let limits = RateLimitSettings {
        buy: wide,
        poll: wide,
        orders: wide,
        admin: wide,
        anonymous: wide,
        ..RateLimitSettings::default()
    };
    // A stream the client opens on a sale where nothing will happen ends after a second, so
    // each example of the stream's route takes that at most.
    let sys =
        spawn_system_with(Options { rate_limits: Some(limits), stream_idle_secs: 1, ..Options::default() });
    let (user, admin) = seed_data(&sys).await;

    let operations = documented_operations(&sys).await;
    let runs =
        [("user", &user), ("admin", &admin)].map(|(who, token)| run(&schemathesis, &sys, who, token, seed));
    // Side by side: half the time, and the buyer's and the admin's requests interleave.
    let (user_run, admin_run) = tokio::join!(runs[0].execute(), runs[1].execute());

    let mut failed = Vec::new();
    for run in [user_run, admin_run] {
        eprintln!(
            "\n== schemathesis as the {} ({:.1} s): {}\n{}",
            run.who,
            run.took.as_secs_f64(),
            run.command,
            run.summary()
        );
        let tested = run.tested();
        // Every operation, the document's own route aside: schemathesis reads the document
        // there, and whether it also counts that route as tested has changed with what the
        // document holds (it does since `GET /api/goods` and the list pages take parameters).
        if !run.passed || !tested.is_some_and(|t| t == operations || t == operations + 1) {
            eprintln!("{}", run.output);
            failed.push(format!(
                "as the {}: exit {:?}, tested {tested:?} of {operations} operations",
                run.who, run.code
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "schemathesis found answers the document does not describe (above): {failed:?}"
    );
    pages_still_render(&sys, &admin).await;
}

/// Whatever the runs created (sales with any price, name or window the API accepted), every page
/// renders from it: a request that crashed a worker on such data is only seen by schemathesis if
/// it came after the data, which depends on the order the two runs went.
async fn pages_still_render(sys: &System, admin: &str) {
    // Every state: the runs create sales that ended long ago too (a page holds what they make).
    let (status, goods) = sys.get("/api/goods?state=upcoming,live,ended&limit=200", None).await;
    assert_eq!(status, 200, "{goods}");
    let ids: Vec<i64> = goods.as_array().expect("a list").iter().filter_map(|g| g["id"].as_i64()).collect();
    let mut paths = vec!["/".to_owned(), "/ended".to_owned()];
    paths.extend(ids.iter().map(|id| format!("/sales/{id}")));
    for path in &paths {
        let res = sys.http.get(sys.url(path)).send().await.unwrap_or_else(|e| panic!("GET {path}: {e}"));
        assert_eq!(res.status(), 200, "GET {path}");
    }
    let (status, body) = sys.post("/api/admin/storefront/render", Some(admin), serde_json::Value::Null).await;
    assert_eq!(status, 200, "render: {body}");
    eprintln!("\n== after the runs: {} sales, every page renders", ids.len());
}

/// schemathesis: `$SECKILL_SCHEMATHESIS`, else on the PATH; else the test fails saying how to
/// get it.
fn schemathesis() -> PathBuf {
    if let Some(path) = std::env::var_os("SECKILL_SCHEMATHESIS") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "SECKILL_SCHEMATHESIS={} is not a file: run scripts/test.sh, which installs it",
            path.display()
        );
        return path;
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("schemathesis"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "schemathesis not found: run the tests with scripts/test.sh (it installs schemathesis \
                 in a venv and exports SECKILL_SCHEMATHESIS), or export SECKILL_SCHEMATHESIS=<path>, \
                 or SECKILL_SKIP_API_CHECK=1 to skip this test"
            )
        })
}

/// Sales 1 (open, in stock), 2 (sold out), 3 (not started) and 4 (ended), orders 1 (the user's),
/// 2 (another buyer's) and 3 (the admin's), so the ids a client tries first exist. Returns the
/// user's and the admin's tokens.
async fn seed_data(sys: &System) -> (String, String) {
    let hours = chrono::Duration::hours;
    let open = sys.open_sale(100).await;
    let sold_out = sys.open_sale(1).await;
    let later = sys.create_sale(5, hours(1), hours(2)).await;
    let ended = sys.create_sale(5, hours(-2), hours(-1)).await;
    let ids = [open.id, sold_out.id, later.id, ended.id].map(|g| g.get());
    assert_eq!(ids, [1, 2, 3, 4], "the sales' ids");

    let (user, other, admin) =
        (sys.dev_token(2, "user").await, sys.dev_token(3, "user").await, sys.dev_token(1, "admin").await);
    let orders = [
        sys.buy_order(&user, open.id).await,
        sys.buy_order(&other, sold_out.id).await,
        sys.buy_order(&admin, open.id).await,
    ];
    assert_eq!(orders, [1, 2, 3], "the orders' ids");
    let (status, body) = sys.buy(&user, sold_out.id).await;
    assert_eq!((status, body["code"].as_str()), (410, Some("SOLD_OUT")), "{body}");
    (user, admin)
}

/// How many operations a run must test: all the document has but `GET /api/openapi.json`,
/// the route schemathesis reads the document from (tested or not: see the check above).
async fn documented_operations(sys: &System) -> usize {
    let (status, doc) = sys.get("/api/openapi.json", None).await;
    assert_eq!(status, 200);
    let paths = doc["paths"].as_object().expect("the document has paths");
    let all: usize = paths
        .values()
        .map(|item| item.as_object().map_or(0, |ops| ops.keys().filter(|k| is_method(k)).count()))
        .sum();
    assert!(paths["/api/openapi.json"].get("get").is_some(), "the document describes its own route");
    all - 1
}

fn is_method(key: &str) -> bool {
    matches!(key, "get" | "put" | "post" | "delete" | "options" | "head" | "patch" | "trace")
}

/// One schemathesis run, not started yet.
struct Run {
    who: &'static str,
    program: PathBuf,
    args: Vec<String>,
    /// The command line to print: the token left out.
    command: String,
}

/// A finished run.
struct Finished {
    who: &'static str,
    command: String,
    code: Option<i32>,
    passed: bool,
    output: String,
    took: Duration,
}

fn run(program: &Path, sys: &System, who: &'static str, token: &str, seed: u64) -> Run {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/api_check.toml");
    let schema = sys.url("/api/openapi.json");
    let header = format!("Authorization: Bearer {token}");
    let args: Vec<String> = vec![
        "--config-file".into(),
        config.display().to_string(),
        "--no-color".into(),
        "run".into(),
        schema,
        "--header".into(),
        header,
        "--max-examples".into(),
        MAX_EXAMPLES.to_string(),
        "--seed".into(),
        seed.to_string(),
        // One worker: the two runs already go side by side, and CPython 3.11 before 3.11.8
        // breaks Hypothesis' parsing of its own source in threads ("AST constructor recursion
        // depth mismatch").
        "--workers".into(),
        "1".into(),
        "--request-timeout".into(),
        "10".into(),
    ];
    let shown: Vec<&str> = args
        .iter()
        .map(|a| if a.starts_with("Authorization:") { "'Authorization: Bearer <token>'" } else { a })
        .collect();
    let command = format!("{} {}", program.display(), shown.join(" "));
    Run { who, program: program.to_owned(), args, command }
}

impl Run {
    /// Runs it in a scratch directory of its own (Hypothesis writes there), stopped after
    /// [`RUN_LIMIT`].
    async fn execute(&self) -> Finished {
        let dir = std::env::temp_dir().join(format!("seckill-api-check-{}", seckill_testkit::unique_tag()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        let started = Instant::now();
        let child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", self.program.display()));
        let result = tokio::time::timeout(RUN_LIMIT, child.wait_with_output()).await;
        let _ = std::fs::remove_dir_all(&dir);
        let out = match result {
            Ok(out) => out.expect("schemathesis' output"),
            Err(_) => {
                panic!("schemathesis as the {} ran longer than {RUN_LIMIT:?}: {}", self.who, self.command)
            }
        };
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        Finished {
            who: self.who,
            command: self.command.clone(),
            code: out.status.code(),
            passed: out.status.success(),
            output,
            took: started.elapsed(),
        }
    }
}

impl Finished {
    /// The report's end: operations, phases, failures, test cases, the closing line.
    fn summary(&self) -> &str {
        self.output.find("=== SUMMARY ===").map_or(self.output.as_str(), |at| {
            let start = self.output[..at].rfind('\n').map_or(0, |nl| nl + 1);
            &self.output[start..]
        })
    }

    /// "Tested: N" of the summary's operations.
    fn tested(&self) -> Option<usize> {
        self.summary().lines().find_map(|line| line.trim().strip_prefix("Tested:")?.trim().parse().ok())
    }
}
