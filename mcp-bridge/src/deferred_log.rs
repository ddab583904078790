//! Log lines of the startup connection, held back until its outcome is known (§M14): a
//! failed startup prints exactly one stderr line, so what the typed client logged on the way
//! (a replacement attempt, a spawn) is dropped then, and replayed on the normal logger when the
//! bridge starts.

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};

/// One held event: its level, where it came from and its rendered fields.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    level: Level,
    target: &'static str,
    text: String,
}

/// Holds the events the outer logger would have printed.
#[derive(Clone)]
pub struct DeferredLog {
    outer: Dispatch,
    held: Arc<Mutex<Vec<Held>>>,
}

impl std::fmt::Debug for DeferredLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredLog")
            .field("held", &self.lock().len())
            .finish()
    }
}

impl DeferredLog {
    /// Holds for the logger in effect now.
    pub fn for_current() -> Self {
        Self::new(tracing::dispatcher::get_default(Dispatch::clone))
    }

    pub fn new(outer: Dispatch) -> Self {
        Self {
            outer,
            held: Arc::default(),
        }
    }

    /// The dispatcher to run the startup under (`WithSubscriber::with_subscriber`).
    pub fn dispatch(&self) -> Dispatch {
        Dispatch::new(self.clone())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends the held events to the current logger, in order, naming where they came from.
    pub fn replay(&self) {
        let held = std::mem::take(&mut *self.lock());
        for Held {
            level,
            target,
            text,
        } in held
        {
            match level {
                Level::ERROR => tracing::error!("{target}: {text}"),
                Level::WARN => tracing::warn!("{target}: {text}"),
                Level::INFO => tracing::info!("{target}: {text}"),
                Level::DEBUG => tracing::debug!("{target}: {text}"),
                _ => tracing::trace!("{target}: {text}"),
            }
        }
    }
}

/// Renders `message` first, then `name=value` for the other fields.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.rest.push(format!("{}={value}", field.name()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push(format!("{}={value:?}", field.name()));
        }
    }
}

impl Subscriber for DeferredLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.is_event() && self.outer.enabled(metadata)
    }

    // Spans are not held: the client's startup path logs events only.
    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut text = fields.message;
        for f in fields.rest {
            text.push(' ');
            text.push_str(&f);
        }
        self.lock().push(Held {
            level: *event.metadata().level(),
            target: event.metadata().target(),
            text,
        });
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::instrument::WithSubscriber;

    /// A logger that records every event's message (the "stderr" of these tests).
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<String>>>);

    impl Subscriber for Recorder {
        fn enabled(&self, metadata: &Metadata<'_>) -> bool {
            *metadata.level() <= Level::INFO
        }
        fn new_span(&self, _span: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _span: &Id, _values: &Record<'_>) {}
        fn record_follows_from(&self, _span: &Id, _follows: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields::default();
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.message);
        }
        fn enter(&self, _span: &Id) {}
        fn exit(&self, _span: &Id) {}
    }

    async fn startup_that_logs() {
        tracing::info!(pid = 42, "spawned the appduct daemon");
        tracing::debug!("below the outer level");
    }

    #[tokio::test]
    async fn held_events_reach_the_logger_only_when_replayed() {
        let recorder = Recorder::default();
        let outer = Dispatch::new(recorder.clone());
        let _guard = tracing::dispatcher::set_default(&outer);
        // Dropped (a failed startup): nothing reaches the logger.
        let dropped = DeferredLog::for_current();
        startup_that_logs()
            .with_subscriber(dropped.dispatch())
            .await;
        assert!(recorder.0.lock().unwrap().is_empty());
        drop(dropped);
        assert!(recorder.0.lock().unwrap().is_empty());
        // Replayed (a started bridge): the events the logger enables, with their fields.
        let kept = DeferredLog::for_current();
        startup_that_logs().with_subscriber(kept.dispatch()).await;
        assert!(recorder.0.lock().unwrap().is_empty());
        kept.replay();
        let lines = recorder.0.lock().unwrap().clone();
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].contains("spawned the appduct daemon pid=42"),
            "{lines:?}"
        );
        assert!(
            lines[0].contains("deferred_log"),
            "names the origin: {lines:?}"
        );
        kept.replay();
        assert_eq!(recorder.0.lock().unwrap().len(), 1, "replayed once");
    }
}
