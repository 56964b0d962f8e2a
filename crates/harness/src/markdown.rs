//! The tools' Markdown documents (docs/BENCHMARKS.md, docs/RELIABILITY.md) come from minijinja
//! templates: the prose in the template, the figures handed to it. One environment for both.

use anyhow::Context as _;
use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment};

use crate::n0;

/// An environment for Markdown: blocks leave no blank lines, nothing is escaped, and the
/// filters `n0` (thousands separators) and `fixed(digits)`.
pub fn environment() -> anyhow::Result<Environment<'static>> {
    let mut env = Environment::new();
    env.set_syntax(
        SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(true)
            .build()
            .context("the template syntax")?,
    );
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.add_filter("n0", |v: f64| n0(v));
    env.add_filter("fixed", |v: f64, digits: usize| format!("{v:.digits$}"));
    Ok(env)
}
