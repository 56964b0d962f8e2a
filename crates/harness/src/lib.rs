//! What the load tool (crates/bench) and the fault suite (crates/faults) share: an HTTP/1
//! client of the gateway that times nothing itself ([`client`]), the gateway's routes and calls,
//! typed, that the end-to-end tests share too ([`api`]), the four service binaries started, stopped, killed and paused on ports of the
//! run's own ([`fleet`], with [`signal`]), private Redis nodes ([`redis_server`]) and the
//! loopback ports they take ([`ports`]), the sale's invariants checked from outside
//! ([`invariants`]), the documents' template environment ([`markdown`]) and the commit a run
//! measured ([`git_commit`]).

pub mod api;
pub mod client;
pub mod fleet;
pub mod invariants;
pub mod markdown;
pub mod ports;
pub mod redis_server;
pub mod signal;

/// The commit checked out (short), with " (with local changes)" when the working tree differs
/// from it outside `excluding` (paths relative to the checkout: what the run itself writes; an
/// absolute one is outside it, and git refuses it as a pathspec); "unknown" outside git.
pub fn git_commit(excluding: &[&str]) -> String {
    let git = |args: &[&str]| std::process::Command::new("git").args(args).output().ok();
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]).filter(|o| o.status.success()) else {
        return "unknown".into();
    };
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let pathspecs: Vec<String> = std::iter::once(".".to_owned())
        .chain(excluding.iter().filter(|p| !p.starts_with('/')).map(|p| format!(":(exclude){p}")))
        .collect();
    let mut args = vec!["diff", "--quiet", "HEAD", "--"];
    args.extend(pathspecs.iter().map(String::as_str));
    let clean = git(&args).is_some_and(|o| o.status.success());
    if clean { head } else { format!("{head} (with local changes)") }
}

/// A whole number with thousands separators (`12,345`).
pub fn n0(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commit_is_marked_only_for_changes_outside_what_is_excluded() {
        let all_excluded = git_commit(&["."]);
        // The tests run inside the project's checkout.
        assert!(
            all_excluded.len() >= 7 && all_excluded.chars().all(|c| c.is_ascii_hexdigit()),
            "{all_excluded}"
        );
        assert_eq!(git_commit(&[".", "/tmp/elsewhere"]), all_excluded, "a path outside is no pathspec");
        let whole = git_commit(&[]);
        assert!(whole == all_excluded || whole == format!("{all_excluded} (with local changes)"), "{whole}");
    }
}
