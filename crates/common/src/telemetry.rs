//! Tracing set-up shared by every binary.

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogFormat, LogSettings};

/// Installs the global subscriber: `RUST_LOG` if set, else `log.level`; JSON or pretty lines,
/// the pretty ones coloured only on a terminal (a log file gets no escape codes, and every
/// request's span fields are formatted without them: a few percent of the gateway's CPU).
/// A client's broken connection is logged at debug level ([`ClientConnectionErrors`]).
/// A second call (several services in one test process) keeps the first subscriber.
pub fn init(settings: &LogSettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    let _ = match settings.format {
        LogFormat::Json => {
            builder.json().flatten_event(true).finish().with(ClientConnectionErrors).try_init()
        }
        LogFormat::Pretty => builder.finish().with(ClientConnectionErrors).try_init(),
    };
}

/// Where actix-http logs a connection that ended in an error, and how each such line starts.
const ACTIX_DISPATCHER: &str = "actix_http::h1::dispatcher";
const STREAM_ERROR: &str = "stream error: ";

/// Keeps the client's errors below ERROR. actix-http logs at ERROR every HTTP/1 connection that
/// ended in an error ("stream error: ..."), and those are the client's doing: a request head it
/// could not parse or that was over the server's limits (answered 400 or 431 already), a client
/// that hung up. Whoever sends such requests would decide how many ERROR lines a service
/// writes, and an alert on ERROR would page for them. This layer drops those lines and writes
/// each again at debug level; every other event passes untouched (actix-http's own failures
/// have lines of their own).
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientConnectionErrors;

impl<S: Subscriber> Layer<S> for ClientConnectionErrors {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let meta = event.metadata();
        if *meta.level() != Level::ERROR || meta.target() != ACTIX_DISPATCHER {
            return true;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        let Some(error) = message.0.strip_prefix(STREAM_ERROR) else {
            return true;
        };
        // Dispatched anew (another level, another call site), so this layer lets it through.
        tracing::debug!(target: "actix_http::h1::dispatcher", error, "a client's connection ended in an error");
        false
    }
}

/// An event's `message` field, as its text.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Every event that reaches it: level and message.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<(Level, String)>>>);

    impl<S: Subscriber> Layer<S> for Capture {
        fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
            let mut message = Message(String::new());
            event.record(&mut message);
            self.0.lock().unwrap().push((*event.metadata().level(), message.0));
        }
    }

    #[test]
    fn a_clients_broken_connection_is_not_an_error() {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::registry().with(ClientConnectionErrors).with(capture.clone());
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "actix_http::h1::dispatcher", "stream error: {}", "request head is too large");
            tracing::error!(target: "actix_http::h1::dispatcher", "Internal server error: unexpected eof");
            tracing::error!(target: "gateway::proxy", "stream error: not actix's");
        });
        let seen = capture.0.lock().unwrap().clone();
        let errors: Vec<&str> =
            seen.iter().filter(|(level, _)| *level == Level::ERROR).map(|(_, m)| m.as_str()).collect();
        assert_eq!(errors, ["Internal server error: unexpected eof", "stream error: not actix's"]);
    }
}
