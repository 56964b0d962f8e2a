//! deploy/docker/Dockerfile: one target per service, running its binary on its port as a
//! numeric non-root user; the builder is the pinned Rust with a cached dependency layer. (Its
//! `ENV` is read by each service's settings loader in tests/settings.rs.)

use std::collections::BTreeMap;

use regex::Regex;
use seckill_deploy_check::{Failures, SERVICES, read};

/// A stage: the image or stage it starts from, and its lines.
struct Stage {
    from: String,
    lines: Vec<String>,
}

/// The stages by name (`FROM image AS name`, or the image's name), lower-cased.
fn stages(text: &str) -> BTreeMap<String, Stage> {
    let from = Regex::new(r"(?i)^FROM\s+(\S+)(?:\s+AS\s+(\S+))?").unwrap();
    let mut stages = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(c) = from.captures(line) {
            let name = c.get(2).map_or(&c[1], |m| m.as_str()).to_lowercase();
            stages.insert(name.clone(), Stage { from: c[1].to_lowercase(), lines: Vec::new() });
            current = Some(name);
        } else if let Some(stage) = current.as_ref().and_then(|n| stages.get_mut(n)) {
            stage.lines.push(line.to_owned());
        }
    }
    stages
}

fn port_of(binary: &str) -> u16 {
    match binary {
        "gateway" => 8080,
        "seckill-service" => 8081,
        "order-service" => 8082,
        _ => 8083,
    }
}

fn check_dockerfile(f: &mut Failures, text: &str) {
    let at = "Dockerfile";
    let stages = stages(text);
    let user_line = Regex::new(r"^USER\s+(\S+)").unwrap();
    let numeric_non_root = Regex::new(r"^[1-9]\d*(:\d+)?$").unwrap();
    for (binary, _) in SERVICES {
        let Some(stage) = stages.get(binary) else {
            f.fail(at, format!("no target `{binary}`"));
            continue;
        };
        let body = stage.lines.join("\n");
        if !body.contains(&format!("ENTRYPOINT [\"/usr/local/bin/{binary}\"]")) {
            f.fail(at, format!("target {binary} does not run /usr/local/bin/{binary}"));
        }
        if !body.contains(&format!("EXPOSE {}", port_of(binary))) {
            f.fail(at, format!("target {binary} does not expose {}", port_of(binary)));
        }
        // The last USER along the chain of stages, from the base to the target.
        let mut chain = Vec::new();
        let mut name = binary.to_owned();
        while let Some(s) = stages.get(&name).filter(|_| !chain.contains(&name)) {
            chain.push(name.clone());
            name.clone_from(&s.from);
        }
        let user = chain
            .iter()
            .rev()
            .flat_map(|n| &stages[n].lines)
            .filter_map(|l| user_line.captures(l).map(|c| c[1].to_owned()))
            .next_back();
        if !user.as_deref().is_some_and(|u| numeric_non_root.is_match(u)) {
            f.fail(at, format!("target {binary} must end with a numeric non-root USER, has {user:?}"));
        }
    }
    let builder =
        Regex::new(r"(?m)^FROM rust:1\.95-bookworm|^FROM rust:\$\{RUST_VERSION\}-bookworm").unwrap();
    if !builder.is_match(text) || !text.contains("ARG RUST_VERSION=1.95") {
        f.fail(at, "the builder must be rust:1.95-bookworm");
    }
    if !text.contains("cargo chef cook") {
        f.fail(at, "no cached dependency layer (cargo chef cook)");
    }
}

#[test]
fn each_service_has_a_target_running_it_on_its_port_as_non_root() {
    let mut f = Failures::default();
    check_dockerfile(&mut f, &read("deploy/docker/Dockerfile"));
    f.assert_none();
}

#[test]
fn a_root_or_missing_target_is_refused() {
    let text = read("deploy/docker/Dockerfile");
    let mut f = Failures::default();
    check_dockerfile(&mut f, &text.replace("FROM runtime AS gateway", "FROM runtime AS gw"));
    let rooted = Regex::new(r"(?m)^USER\s+\S+").unwrap().replace_all(&text, "USER root");
    check_dockerfile(&mut f, &rooted);
    let all = f.messages().join("\n");
    assert!(all.contains("no target `gateway`"), "{all}");
    assert!(all.contains("must end with a numeric non-root USER, has Some(\"root\")"), "{all}");
}
