//! Tracing set-up shared by every binary.

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber: `RUST_LOG` if set, else `log.level`; JSON or pretty lines,
/// the pretty ones coloured only on a terminal (a log file gets no escape codes, and every
/// request's span fields are formatted without them: a few percent of the gateway's CPU).
/// A second call (several services in one test process) keeps the first subscriber.
pub fn init(settings: &LogSettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    let _ = match settings.format {
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
        LogFormat::Pretty => builder.try_init(),
    };
}
