//! deploy/grafana/seckill.json and the PromQL of docs/OPERATIONS.md (its ```promql blocks): every
//! metric a query names must be one the services export, read from their Rust sources
//! (`counter!`, `gauge!`, `histogram!`, and the shed counters named to `InFlight::new`), so a
//! renamed metric fails here instead of leaving a panel or an alert blank in the middle of a sale.
//! The dashboard must also import as it is: a Prometheus datasource variable every panel uses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use regex::Regex;
use seckill_deploy_check::{Failures, read};
use serde_json::Value;

const DASHBOARD: &str = "deploy/grafana/seckill.json";
const RUNBOOK: &str = "docs/OPERATIONS.md";

/// Workspace members that no service links: their metric names (if any) are never scraped.
const NOT_IN_A_SERVICE: [&str; 4] = ["crates/testkit", "crates/e2e", "crates/bench", "crates/deploy-check"];

/// What the runbook may name besides our own metrics, and who exports it. The dashboard shows
/// our metrics only.
const EXTERNAL: [(&str, &str); 2] = [
    ("up", "Prometheus itself, one series per scrape target"),
    ("rabbitmq_queue_messages_ready", "RabbitMQ's Prometheus plugin, /metrics/per-object"),
];

/// The suffixes the exporter writes a histogram under (never its bare name).
const HISTOGRAM_SERIES: [&str; 3] = ["_bucket", "_sum", "_count"];

/// PromQL words that are not metrics where no `(` follows them: aggregations written
/// `sum by (x) (...)`, binary operators and modifiers.
const KEYWORDS: [&str; 27] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
    "atan2",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "inf",
    "nan",
];

/// Keywords followed by a list of label names in parentheses.
const LABEL_LISTS: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];

/// The metric names the services export: counters and gauges as written, histograms by their
/// base name (the exporter writes `<name>_bucket`, `_sum` and `_count`).
#[derive(Debug, Default)]
struct Exported {
    plain: BTreeSet<String>,
    histograms: BTreeSet<String>,
}

impl Exported {
    fn knows(&self, name: &str) -> bool {
        self.plain.contains(name)
            || HISTOGRAM_SERIES
                .iter()
                .any(|s| name.strip_suffix(s).is_some_and(|base| self.histograms.contains(base)))
    }
}

/// The workspace the tests were built from (not `SECKILL_DEPLOY_ROOT`: the metrics are the code's).
fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The `src/` folders of the workspace members a service links.
fn service_sources() -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(workspace().join("Cargo.toml")).expect("Cargo.toml");
    let members = Regex::new(r"(?s)members\s*=\s*\[(.*?)\]").unwrap();
    let list = members.captures(&manifest).expect("[workspace] members")[1].to_owned();
    let quoted = Regex::new(r#""([^"]+)""#).unwrap();
    let dirs: Vec<PathBuf> = quoted
        .captures_iter(&list)
        .map(|c| c[1].to_owned())
        .filter(|m| !NOT_IN_A_SERVICE.contains(&m.as_str()))
        .map(|m| workspace().join(m).join("src"))
        .collect();
    assert!(dirs.len() >= 8, "the services and their libraries: {dirs:?}");
    dirs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Reads the metric names from the services' sources. A metric macro whose name is not a
/// string literal is a failure unless it is the shed counter (`crates/web/src/shed.rs`), whose
/// names are the ones passed to `InFlight::new`: a name this scan cannot see would make every
/// query of it look unknown.
fn exported(f: &mut Failures) -> Exported {
    let test_module = Regex::new(r"#\[cfg\(test\)\]\s*mod\s+\w+").unwrap();
    let call = Regex::new(r"\b(counter|gauge|histogram)!\(\s*(\S)").unwrap();
    let named = Regex::new(r#"\b(counter|gauge|histogram)!\(\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)""#).unwrap();
    let shed = Regex::new(r#"InFlight::new\([^;]*?,\s*"([a-zA-Z_:][a-zA-Z0-9_:]*)"\s*\)"#).unwrap();
    let mut found = Exported::default();
    let mut files = Vec::new();
    for dir in service_sources() {
        rust_files(&dir, &mut files);
    }
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        // The unit tests at the end of a file record made-up names of their own.
        let text = test_module.find(&text).map_or(text.as_str(), |m| &text[..m.start()]);
        let at = path.strip_prefix(workspace()).unwrap_or(&path).display().to_string();
        for c in named.captures_iter(text) {
            let set = if &c[1] == "histogram" { &mut found.histograms } else { &mut found.plain };
            set.insert(c[2].to_owned());
        }
        for c in call.captures_iter(text) {
            if &c[2] != "\"" && !at.ends_with("crates/web/src/shed.rs") {
                f.fail(&at, format!("a {}! whose name is not a string literal: add it to this scan", &c[1]));
            }
        }
        for c in shed.captures_iter(text) {
            found.plain.insert(c[1].to_owned());
        }
    }
    found
}

/// The index just past the bracket that closes the one at `open`, strings inside skipped.
fn skip_group(chars: &[char], open: usize) -> usize {
    let start = chars[open];
    let close = match start {
        '{' => '}',
        '(' => ')',
        _ => ']',
    };
    let mut depth = 0;
    let mut quote: Option<char> = None;
    let mut j = open;
    while j < chars.len() {
        let c = chars[j];
        match quote {
            Some(_) if c == '\\' => j += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if matches!(c, '"' | '\'' | '`') => quote = Some(c),
            None if c == start => depth += 1,
            None if c == close => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            None => {}
        }
        j += 1;
    }
    j
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// The metric names a PromQL expression (or a Grafana query) reads: identifiers not followed
/// by `(` that are not keywords, outside label matchers `{...}`, label lists `by (...)`,
/// strings, ranges `[...]`, numbers and durations, comments and Grafana variables (`$x`, `${x}`).
fn metric_names(expr: &str) -> Vec<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if matches!(c, '"' | '\'' | '`') {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '{' || c == '[' {
            i = skip_group(&chars, i);
        } else if c == '$' {
            i += 1;
            if chars.get(i) == Some(&'{') {
                i = skip_group(&chars, i);
            } else {
                while i < chars.len() && ident_char(chars[i]) {
                    i += 1;
                }
            }
        } else if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && ident_char(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut after = i;
            while after < chars.len() && chars[after].is_whitespace() {
                after += 1;
            }
            let paren = chars.get(after) == Some(&'(');
            if LABEL_LISTS.contains(&word.as_str()) && paren {
                i = skip_group(&chars, after);
            } else if !paren && !KEYWORDS.contains(&word.as_str()) {
                names.push(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// The expressions of a dashboard, each with where it is: every panel's targets (rows' nested
/// panels included) and the template variables' queries. Structural problems go to `f`.
fn dashboard_queries(f: &mut Failures, text: &str) -> Vec<(String, String)> {
    let board: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            f.fail(DASHBOARD, format!("not JSON: {e}"));
            return Vec::new();
        }
    };
    for key in ["title", "uid"] {
        if board[key].as_str().is_none_or(str::is_empty) {
            f.fail(DASHBOARD, format!("no `{key}`"));
        }
    }
    if !board["schemaVersion"].is_u64() {
        f.fail(DASHBOARD, "no numeric `schemaVersion`");
    }
    let variables = board["templating"]["list"].as_array().cloned().unwrap_or_default();
    let datasource = variables.iter().find(|v| v["name"] == "datasource");
    if !datasource.is_some_and(|v| v["type"] == "datasource" && v["query"] == "prometheus") {
        f.fail(DASHBOARD, "no template variable `datasource` of type datasource, query prometheus");
    }
    let selector = Regex::new(r"^\s*label_values\((.*),\s*[a-zA-Z_]\w*\s*\)\s*$").unwrap();
    let mut queries = Vec::new();
    for v in &variables {
        let name = v["name"].as_str().unwrap_or_default();
        if v["type"] != "query" {
            continue;
        }
        let at = format!("variable {name}");
        check_datasource(f, &at, &v["datasource"]);
        // A string, or the object newer Grafana versions write.
        let query = v["query"].as_str().or_else(|| v["query"]["query"].as_str()).unwrap_or_default();
        // label_values(<selector>, <label>): only the selector names a metric.
        match selector.captures(query) {
            Some(c) => queries.push((at, c[1].to_owned())),
            None => f.fail(&at, format!("not a label_values(<metric>, <label>) query: {query:?}")),
        }
    }
    let mut ids = BTreeSet::new();
    let mut panels: Vec<Value> = board["panels"].as_array().cloned().unwrap_or_default();
    if panels.is_empty() {
        f.fail(DASHBOARD, "no panels");
    }
    while let Some(panel) = panels.pop() {
        let title = panel["title"].as_str().unwrap_or_default().to_owned();
        let at = format!("panel {title:?}");
        if !panel["id"].as_u64().is_some_and(|id| ids.insert(id)) {
            f.fail(&at, "no id, or the id of another panel");
        }
        if !["h", "w", "x", "y"].iter().all(|k| panel["gridPos"][k].is_u64()) {
            f.fail(&at, "no gridPos {h, w, x, y}");
        }
        if panel["type"] == "row" {
            panels.extend(panel["panels"].as_array().cloned().unwrap_or_default());
            continue;
        }
        check_datasource(f, &at, &panel["datasource"]);
        let targets = panel["targets"].as_array().cloned().unwrap_or_default();
        if targets.is_empty() {
            f.fail(&at, "no targets");
        }
        for target in targets {
            if !target["datasource"].is_null() {
                check_datasource(f, &at, &target["datasource"]);
            }
            match target["expr"].as_str().filter(|e| !e.trim().is_empty()) {
                Some(expr) => queries.push((at.clone(), expr.to_owned())),
                None => f.fail(&at, "a target without `expr`"),
            }
        }
    }
    queries
}

/// Every panel and query reads the datasource the importer picks.
fn check_datasource(f: &mut Failures, at: &str, ds: &Value) {
    let uid = ds.as_str().or_else(|| ds["uid"].as_str());
    if uid != Some("${datasource}") || ds.get("type").is_some_and(|t| t != "prometheus") {
        f.fail(
            at,
            format!("datasource must be {{\"type\": \"prometheus\", \"uid\": \"${{datasource}}\"}}, is {ds}"),
        );
    }
}

/// The ```promql blocks of the runbook, each with the heading it sits under (headings only
/// outside fenced blocks: a shell comment is no heading).
fn runbook_queries(text: &str) -> Vec<(String, String)> {
    let mut heading = String::new();
    let mut out = Vec::new();
    // Inside a ```promql block (its text so far), or inside another fenced block.
    let mut promql: Option<String> = None;
    let mut other = false;
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```");
        if let Some(body) = &mut promql {
            if fence {
                out.push((format!("{RUNBOOK}, {heading}"), std::mem::take(body)));
                promql = None;
            } else {
                body.push_str(line);
                body.push('\n');
            }
        } else if other {
            other = !fence;
        } else if line.trim() == "```promql" {
            promql = Some(String::new());
        } else if fence {
            other = true;
        } else if line.starts_with('#') {
            heading = line.trim_start_matches('#').trim().to_owned();
        }
    }
    out
}

/// The unknown names of each query, and queries that name no metric at all (a tokenizer that
/// skipped too much would pass anything).
fn check_names(f: &mut Failures, exported: &Exported, queries: &[(String, String)], external: &[&str]) {
    for (at, expr) in queries {
        let names = metric_names(expr);
        if names.is_empty() {
            f.fail(at, format!("names no metric: {expr}"));
        }
        let unknown: BTreeSet<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| !exported.knows(n) && !external.contains(n))
            .collect();
        if !unknown.is_empty() {
            f.fail(at, format!("metrics no service exports: {unknown:?} in {}", expr.trim()));
        }
    }
}

/// A `_bucket` series exists only if the exporter writes histograms, not summaries: it does
/// when buckets are set (crates/web/src/metrics.rs); `histogram_quantile` needs them.
fn check_buckets(f: &mut Failures, queries: &[(String, String)]) {
    let uses_buckets = queries.iter().any(|(_, e)| metric_names(e).iter().any(|n| n.ends_with("_bucket")));
    let recorder =
        std::fs::read_to_string(workspace().join("crates/web/src/metrics.rs")).expect("metrics.rs");
    if uses_buckets && !recorder.contains(".set_buckets(") {
        f.fail(
            "crates/web/src/metrics.rs",
            "no set_buckets: histograms are written as summaries, no _bucket",
        );
    }
}

fn check_dashboard(f: &mut Failures, exported: &Exported, text: &str) {
    let queries = dashboard_queries(f, text);
    check_names(f, exported, &queries, &[]);
    check_buckets(f, &queries);
}

#[test]
fn the_dashboard_imports_and_reads_only_metrics_the_services_export() {
    let mut f = Failures::default();
    let exported = exported(&mut f);
    check_dashboard(&mut f, &exported, &read(DASHBOARD));
    f.assert_none();
}

/// A metric added to the code gets a panel too: nobody watches what the dashboard leaves out.
#[test]
fn every_metric_the_services_export_has_a_panel() {
    let mut f = Failures::default();
    let exported = exported(&mut f);
    let shown: BTreeSet<String> =
        dashboard_queries(&mut f, &read(DASHBOARD)).iter().flat_map(|(_, e)| metric_names(e)).collect();
    for name in &exported.plain {
        if !shown.contains(name) {
            f.fail(DASHBOARD, format!("no panel reads {name}"));
        }
    }
    for name in &exported.histograms {
        if !HISTOGRAM_SERIES.iter().any(|s| shown.contains(&format!("{name}{s}"))) {
            f.fail(DASHBOARD, format!("no panel reads the histogram {name}"));
        }
    }
    f.assert_none();
}

#[test]
fn the_runbook_queries_read_only_metrics_the_services_export() {
    let mut f = Failures::default();
    let exported = exported(&mut f);
    let queries = runbook_queries(&read(RUNBOOK));
    assert!(queries.len() >= 10, "{RUNBOOK}: only {} ```promql blocks", queries.len());
    let external: Vec<&str> = EXTERNAL.iter().map(|(name, _)| *name).collect();
    check_names(&mut f, &exported, &queries, &external);
    check_buckets(&mut f, &queries);
    f.assert_none();
}

#[test]
fn the_scan_finds_the_metrics_of_every_kind() {
    let mut f = Failures::default();
    let exported = exported(&mut f);
    f.assert_none();
    // A counter with labels from crates/web, one from a service, a gauge, a histogram, the
    // shed counters of both services, and a consumer's counter from crates/infra.
    for name in [
        "http_requests_total",
        "seckill_orders_accepted_total",
        "seckill_audit_differences",
        "gateway_requests_shed_total",
        "seckill_requests_shed_total",
        "amqp_messages_dead_lettered_total",
    ] {
        assert!(exported.plain.contains(name), "{name} not found: {exported:?}");
    }
    assert!(exported.histograms.contains("http_request_duration_seconds"), "{exported:?}");
    assert!(exported.knows("http_request_duration_seconds_bucket"));
    assert!(!exported.knows("http_request_duration_seconds"), "a histogram has no series of its bare name");
    assert!(!exported.knows("http_requests_total_count"), "a counter has no _count series");
    // Names only unit tests record are not exported.
    assert!(!exported.plain.contains("test_shed_total") && !exported.plain.contains("bench_shed_total"));
}

#[test]
fn the_tokenizer_finds_metrics_and_nothing_else() {
    let names = |e: &str| metric_names(e).join(" ");
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le, route) (rate(http_request_duration_seconds_bucket{route="/api/seckill/{goods_id}/orders", instance=~"$instance"}[$__rate_interval])))"#
        ),
        "http_request_duration_seconds_bucket"
    );
    assert_eq!(
        names(
            "sum without (instance) (increase(a_total[5m] offset 1h)) / on (job) group_left (x) b > bool 0 # c_total"
        ),
        "a_total b"
    );
    assert_eq!(
        names(r#"max by (goods_id) (seckill_audit_differences{goods_id!~"1|2"}) > 0 and up"#),
        "seckill_audit_differences up"
    );
    assert_eq!(names("sum(rate(x_total[${__range}])) or vector(0) unless count(y)"), "x_total y");
    assert_eq!(names(r#"topk(5, m{a="by (z)", b='}'})"#), "m");
}

#[test]
fn a_misspelt_metric_or_datasource_is_reported() {
    let mut f = Failures::default();
    let exported = exported(&mut f);
    let text = read(DASHBOARD);
    assert!(text.contains("seckill_orders_accepted_total"), "the dashboard shows accepted buys");
    let misspelt = text.replace("seckill_orders_accepted_total", "seckill_order_accepted_total");
    check_dashboard(&mut f, &exported, &misspelt);
    let hardwired = text.replacen("${datasource}", "prometheus-main", 1);
    check_dashboard(&mut f, &exported, &hardwired);
    let all = f.messages().join("\n");
    assert!(all.contains(r#"metrics no service exports: {"seckill_order_accepted_total"}"#), "{all}");
    assert!(all.contains("prometheus-main"), "{all}");

    let mut f = Failures::default();
    let runbook = "## An alert\n\n```sh\n# a comment, no heading\n```\n\n```promql\nrate(seckill_ordres_accepted_total[5m]) > 0\n```\n";
    let queries = runbook_queries(runbook);
    check_names(&mut f, &exported, &queries, &[]);
    let all = f.messages().join("\n");
    assert!(all.contains("docs/OPERATIONS.md, An alert: metrics no service exports"), "{all}");
    assert!(all.contains("seckill_ordres_accepted_total"), "{all}");
}

/// The outside names allowed are all in use: the list stays no longer than the runbook needs.
#[test]
fn every_outside_metric_allowed_is_one_the_runbook_reads() {
    let read_by_runbook: BTreeSet<String> =
        runbook_queries(&read(RUNBOOK)).iter().flat_map(|(_, e)| metric_names(e)).collect();
    for (name, from) in EXTERNAL {
        assert!(read_by_runbook.contains(name), "{name} ({from}) is allowed but no query reads it");
    }
}
