//! The `tools call` progress display on stderr (§L7.3): a spinner while calling, elapsed and
//! deadline once started, a bar while every progress value is within [0, 1], a spinner with the
//! raw value after any value outside it, the latest message, `Cancelling…` after Ctrl-C.
//!
//! [`Display`] is pure state plus a line renderer; [`Terminal`] writes it with `\r` and
//! erase-line, at most 10 times per second, and clears it before anything else is printed.
//! Each draw is cut to the terminal's width as it is then ([`frame`]), so the line never
//! wraps; after a resize narrowed the terminal, the rows the previous line may have been
//! reflowed onto are erased too.

use std::io::Write as _;
use std::time::{Duration, Instant};

use appduct_client::client::CallProgress;
use serde_json::Number;

use crate::render;

/// The display appears this long after the request if no response arrived.
pub const APPEAR_AFTER: Duration = Duration::from_millis(250);
/// Minimum time between two redraws (10 per second).
pub const REDRAW_EVERY: Duration = Duration::from_millis(100);
/// Width of the bar in cells.
pub const BAR_WIDTH: usize = 10;
/// The terminal width assumed when stderr does not report one.
pub const FALLBACK_COLUMNS: usize = 80;

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// What the display shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Display {
    name: String,
    /// The selector the user gave, until `tool_call_started` names the alias.
    target: String,
    started: Option<Started>,
    progress: Option<f64>,
    /// A value outside [0, 1] was seen: spinner with `progress {value}` for the rest.
    unbounded: Option<String>,
    message: Option<String>,
    cancelling: bool,
}

#[derive(Debug, Clone, PartialEq)]
struct Started {
    alias: String,
    deadline_ms: u64,
}

fn number_text(n: &Number) -> String {
    n.to_string()
}

impl Display {
    pub fn new(name: &str, selector: Option<&str>) -> Self {
        Self {
            name: name.to_owned(),
            target: selector.unwrap_or("the session").to_owned(),
            started: None,
            progress: None,
            unbounded: None,
            message: None,
            cancelling: false,
        }
    }

    /// Applies one per-call notification.
    pub fn update(&mut self, item: &CallProgress) {
        match item {
            CallProgress::Started(s) => {
                self.started = Some(Started {
                    alias: render::clean_line(&s.alias),
                    deadline_ms: s.deadline_ms,
                });
            }
            CallProgress::Progress(p) => {
                if let Some(n) = &p.progress {
                    match n.as_f64() {
                        Some(v) if self.unbounded.is_none() && (0.0..=1.0).contains(&v) => {
                            self.progress = Some(v);
                        }
                        _ => self.unbounded = Some(number_text(n)),
                    }
                }
                if let Some(m) = &p.message {
                    self.message = Some(m.clone());
                }
            }
        }
    }

    pub fn set_cancelling(&mut self) {
        self.cancelling = true;
    }

    /// The line for `elapsed` since the request and spinner frame `frame`.
    pub fn line(&self, elapsed: Duration, frame: usize) -> String {
        let spin = SPINNER[frame % SPINNER.len()];
        let mut line = match &self.started {
            None => format!("{spin} Calling {} on {}…", self.name, self.target),
            Some(s) => {
                format!(
                    "{} on {}  {:.1}s / {:.1}s",
                    self.name,
                    s.alias,
                    elapsed.as_secs_f64(),
                    s.deadline_ms as f64 / 1000.0
                )
            }
        };
        if self.started.is_some() {
            let indicator = match (&self.unbounded, self.progress) {
                (Some(v), _) => format!("{spin} progress {v}"),
                (None, Some(p)) => bar(p),
                (None, None) => spin.to_string(),
            };
            line = format!("{indicator} {line}");
        }
        if let Some(m) = &self.message {
            line.push_str("  ");
            line.push_str(&single_line(m));
        }
        if self.cancelling {
            line.push_str("  Cancelling…");
        }
        line
    }
}

/// `[######----] 66%`.
pub fn bar(p: f64) -> String {
    let p = p.clamp(0.0, 1.0);
    let filled = ((p * BAR_WIDTH as f64).round() as usize).min(BAR_WIDTH);
    format!(
        "[{}{}] {}%",
        "#".repeat(filled),
        "-".repeat(BAR_WIDTH - filled),
        (p * 100.0).floor() as u32
    )
}

/// An app-supplied progress message on the one-line bar: line breaks become spaces, other
/// control characters are removed (SECURITY.md §4.13), at most 120 characters.
fn single_line(text: &str) -> String {
    render::clean_line(&text.replace(['\n', '\r'], " "))
        .chars()
        .take(120)
        .collect()
}

/// Draws a [`Display`] on stderr when it is active.
#[derive(Debug)]
pub struct Terminal {
    active: bool,
    shown: bool,
    requested: Instant,
    last_draw: Option<Instant>,
    frame: usize,
    /// Display width of the line on screen (0 when none).
    drawn_width: usize,
    pub display: Display,
}

impl Terminal {
    /// `active` is false without a terminal, under `--json` or with `--no-progress`.
    pub fn new(active: bool, display: Display) -> Self {
        Self {
            active,
            shown: false,
            requested: Instant::now(),
            last_draw: None,
            frame: 0,
            drawn_width: 0,
            display,
        }
    }

    pub fn is_active(&self) -> bool {
        self.active
    }

    pub fn elapsed(&self) -> Duration {
        self.requested.elapsed()
    }

    /// Redraws when the display is due (after [`APPEAR_AFTER`], at most every
    /// [`REDRAW_EVERY`]).
    pub fn tick(&mut self) {
        if !self.active || self.elapsed() < APPEAR_AFTER {
            return;
        }
        if self.last_draw.is_some_and(|at| at.elapsed() < REDRAW_EVERY) {
            return;
        }
        self.frame = self.frame.wrapping_add(1);
        let line = self.display.line(self.elapsed(), self.frame);
        let (text, width) = frame(Some(&line), self.drawn_width, stderr_columns());
        write_err(&text);
        self.drawn_width = width;
        self.shown = true;
        self.last_draw = Some(Instant::now());
    }

    /// Erases the line so other output starts clean.
    pub fn clear(&mut self) {
        if self.shown {
            let (text, _) = frame(None, self.drawn_width, stderr_columns());
            write_err(&text);
            self.drawn_width = 0;
            self.shown = false;
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        self.clear();
    }
}

/// What to write to replace the line on screen (`previous` columns wide, drawn earlier) by
/// `line` (or erase it), on a terminal `columns` wide now; and the width of what was drawn.
///
/// The line is cut to `columns - 1` display columns ([`render::cut_to_width`]): never the last
/// column, where some terminals wrap at once. When the terminal is now narrower than the
/// previous line, a reflowing terminal may have spread it over several rows: the cursor moves
/// up to the first of them and everything below is erased.
pub fn frame(line: Option<&str>, previous: usize, columns: usize) -> (String, usize) {
    let columns = columns.max(1);
    let mut out = String::from("\r");
    let rows = previous.div_ceil(columns).max(1);
    if rows > 1 {
        out.push_str(&format!("\x1b[{}A", rows - 1));
        out.push_str("\x1b[J");
    } else {
        out.push_str("\x1b[2K");
    }
    let mut width = 0;
    if let Some(line) = line {
        let cut = render::cut_to_width(line, columns - 1);
        width = render::display_width(&cut);
        out.push_str(&cut);
    }
    (out, width)
}

/// The width of the terminal on stderr, [`FALLBACK_COLUMNS`] when it reports none.
fn stderr_columns() -> usize {
    crate::output::terminal_columns(std::io::stderr()).unwrap_or(FALLBACK_COLUMNS)
}

fn write_err(text: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(text.as_bytes());
    let _ = err.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use appduct_protocol::control::{ToolCallProgressParams, ToolCallStartedParams};
    use appduct_protocol::jsonrpc::RequestId;

    fn started() -> CallProgress {
        CallProgress::Started(ToolCallStartedParams::new(
            RequestId::Number(1),
            "cli-1",
            "s",
            "pixel-8",
            "sum",
            5000,
            0,
        ))
    }

    fn progress(v: Option<f64>, m: Option<&str>) -> CallProgress {
        CallProgress::Progress(
            ToolCallProgressParams::new(RequestId::Number(1), "cli-1", "s", 0)
                .with_progress(v.and_then(Number::from_f64))
                .with_message(m.map(str::to_owned)),
        )
    }

    #[test]
    fn calling_then_started_then_bar() {
        let mut d = Display::new("sum", Some("pixel-8"));
        assert!(
            d.line(Duration::ZERO, 0)
                .ends_with("Calling sum on pixel-8…")
        );
        d.update(&started());
        let line = d.line(Duration::from_millis(1500), 0);
        assert!(line.contains("sum on pixel-8  1.5s / 5.0s"), "{line}");
        d.update(&progress(Some(0.66), Some("almost there")));
        let line = d.line(Duration::from_millis(1500), 0);
        assert!(line.starts_with("[#######---] 66%"), "{line}");
        assert!(line.ends_with("almost there"), "{line}");
    }

    #[test]
    fn a_value_outside_the_unit_interval_switches_to_a_spinner_for_good() {
        let mut d = Display::new("sync", None);
        d.update(&started());
        d.update(&progress(Some(42.0), None));
        assert!(d.line(Duration::ZERO, 0).contains("progress 42"));
        // In range again: still the spinner, now with the latest value.
        d.update(&progress(Some(0.5), None));
        let line = d.line(Duration::ZERO, 0);
        assert!(
            line.contains("progress 0.5") && !line.contains('['),
            "{line}"
        );
        d.set_cancelling();
        assert!(d.line(Duration::ZERO, 0).ends_with("Cancelling…"));
    }

    #[test]
    fn app_supplied_alias_and_message_reach_the_bar_without_control_characters() {
        let mut d = Display::new("evil", None);
        d.update(&CallProgress::Started(ToolCallStartedParams::new(
            RequestId::Number(1),
            "cli-1",
            "s",
            "pixel\u{1b}[2J-8",
            "evil",
            5000,
            0,
        )));
        d.update(&progress(
            Some(0.5),
            Some("a\u{1b}]0;x\u{7}b\u{9b}2J\nc\td\u{7f}"),
        ));
        let line = d.line(Duration::ZERO, 0);
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(line.contains("evil on pixel[2J-8"), "{line}");
        assert!(line.ends_with("a]0;xb2J cd"), "{line}");
    }

    #[test]
    fn bars() {
        assert_eq!(bar(0.0), "[----------] 0%");
        assert_eq!(bar(1.0), "[##########] 100%");
        assert_eq!(bar(0.33), "[###-------] 33%");
    }

    #[test]
    fn frames_are_cut_to_the_terminal_width() {
        let mut d = Display::new("sum", Some("pixel-8"));
        d.update(&started());
        d.update(&progress(
            Some(0.5),
            Some("日本語のメッセージ 📱 e\u{301} and more text"),
        ));
        let line = d.line(Duration::from_millis(1500), 0);
        assert!(render::display_width(&line) > 40, "{line}");
        for columns in [1, 2, 20, 40, 80, 200] {
            let (text, width) = frame(Some(&line), 0, columns);
            let drawn = text.strip_prefix("\r\x1b[2K").unwrap();
            assert_eq!(render::display_width(drawn), width);
            assert!(width < columns.max(2), "{columns}: {drawn}");
            if render::display_width(&line) >= columns {
                assert!(drawn.ends_with('…') || columns == 1, "{columns}: {drawn}");
            } else {
                assert_eq!(drawn, line);
            }
        }
        // 20 columns: the bar and part of the name, 19 columns at most.
        let (text, width) = frame(Some(&line), 0, 20);
        assert_eq!(text, "\r\x1b[2K[#####-----] 50% s…");
        assert_eq!(width, 19);
    }

    #[test]
    fn a_narrower_terminal_erases_the_rows_the_last_line_was_reflowed_onto() {
        // 79 columns drawn, now 20 wide: up to 4 rows; move up 3 and erase below.
        let (text, _) = frame(Some("x"), 79, 20);
        assert_eq!(text, "\r\x1b[3A\x1b[Jx");
        // Same width or wider: only the current row.
        assert_eq!(frame(Some("x"), 19, 20).0, "\r\x1b[2Kx");
        assert_eq!(frame(None, 79, 200).0, "\r\x1b[2K");
        // Clearing after a shrink erases the reflowed rows too.
        assert_eq!(frame(None, 40, 20).0, "\r\x1b[1A\x1b[J");
    }

    #[test]
    fn an_inactive_terminal_never_draws() {
        let mut t = Terminal::new(false, Display::new("sum", None));
        t.tick();
        assert!(!t.shown);
    }
}
