//! Rendering of a [`WatchState`] (§L23): one function from the model to a ratatui frame, so a
//! `TestBackend` shows exactly what a terminal would. No state lives here.

use appduct_protocol::control::CallState;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Sparkline, Table};

use super::state::{WatchState, elapsed_ms, progress_ratio};
use crate::commands::audit;
use crate::render;

/// Width of the text progress bar of a call, in cells.
const BAR_CELLS: usize = 10;

/// The keys, as the footer lists them.
pub const KEYS: &str = "q quit  ↑/↓ select  a approve  A approve 15 min  d deny";

/// Draws the whole view into `frame`.
pub fn draw(frame: &mut Frame, state: &WatchState, colour: bool) {
    let [header, top, calls, bottom, sparks, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(5),
        Constraint::Min(4),
        Constraint::Min(5),
        Constraint::Length(4),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let [sessions, approvals] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(top);
    let [events, audit] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(bottom);
    let [rate, latency] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(sparks);

    frame.render_widget(Paragraph::new(header_line(state)), header);
    draw_sessions(frame, state, sessions);
    draw_approvals(frame, state, approvals, colour);
    draw_calls(frame, state, calls);
    draw_lines(
        frame,
        events,
        "Events",
        state.events.iter().cloned().collect(),
    );
    draw_lines(
        frame,
        audit,
        "Audit",
        state.audit.iter().map(audit_line).collect(),
    );
    let per_second = state.calls_per_second();
    let last_rate = per_second.last().copied().unwrap_or(0);
    frame.render_widget(
        Sparkline::default()
            .block(Block::bordered().title(format!("Calls/s (60 s)  now {last_rate}")))
            .data(&per_second),
        rate,
    );
    let latency_ms = state.latency_ms();
    let last_latency = latency_ms
        .iter()
        .rev()
        .find(|l| **l > 0)
        .copied()
        .unwrap_or(0);
    frame.render_widget(
        Sparkline::default()
            .block(Block::bordered().title(format!("Latency ms (60 s)  last {last_latency}")))
            .data(&latency_ms),
        latency,
    );
    let footer_text = match &state.status {
        Some(status) => format!("{status}   |  {KEYS}"),
        None => KEYS.to_owned(),
    };
    frame.render_widget(Paragraph::new(render::clean_line(&footer_text)), footer);
}

fn header_line(state: &WatchState) -> String {
    format!(
        "appduct watch  {}  sessions {}  calls {}  waiting {}",
        state.daemon.as_deref().unwrap_or(""),
        state.sessions.len(),
        state.calls.len(),
        state.approvals.len()
    )
}

fn draw_sessions(frame: &mut Frame, state: &WatchState, area: Rect) {
    // The LEASE column (§L23.1) only while some session is leased: the panel is narrow.
    let leases = state.sessions.iter().any(|s| s.lease.is_some());
    let rows = state.sessions.iter().map(|s| {
        let device = [&s.device.manufacturer, &s.device.model, &s.device.os]
            .into_iter()
            .flatten()
            .map(|p| render::clean_line(p))
            .collect::<Vec<_>>()
            .join(" ");
        let mut cells = vec![
            render::clean_line(&s.alias),
            s.state.as_str().to_owned(),
            if device.is_empty() {
                "-".to_owned()
            } else {
                device
            },
            s.tool_count.to_string(),
        ];
        if leases {
            cells.push(render::clean_line(&super::state::lease_cell(
                s,
                state.now_ms,
            )));
        }
        Row::new(cells)
    });
    let mut widths = vec![
        Constraint::Fill(2),
        Constraint::Length(9),
        Constraint::Fill(3),
        Constraint::Length(5),
    ];
    let mut header = vec!["ALIAS", "STATE", "DEVICE", "TOOLS"];
    if leases {
        widths.push(Constraint::Fill(3));
        header.push("LEASE");
    }
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(header_style()))
        .block(Block::bordered().title("Sessions"));
    frame.render_widget(table, area);
}

fn draw_approvals(frame: &mut Frame, state: &WatchState, area: Rect, colour: bool) {
    let now_s = state.now_ms / 1000;
    let rows = state.approvals.iter().enumerate().map(|(i, a)| {
        let marker = if i == state.selected { ">" } else { " " };
        let row = Row::new(vec![
            format!("{marker} {}", a.approval_id),
            render::clean_line(&a.tool),
            render::clean_line(&a.alias),
            a.caller.as_str().to_owned(),
            render::age(a.expires_at.saturating_sub(now_s)),
        ]);
        if i == state.selected && colour {
            row.style(Style::default().add_modifier(Modifier::REVERSED))
        } else {
            row
        }
    });
    let table = Table::new(
        rows,
        [
            Constraint::Min(28),
            Constraint::Percentage(25),
            Constraint::Percentage(20),
            Constraint::Length(6),
            Constraint::Length(5),
        ],
    )
    .header(header_row(["APPROVAL", "TOOL", "ALIAS", "CALLER", "LEFT"]))
    .block(Block::bordered().title("Waiting for an operator (a approve, d deny)"));
    frame.render_widget(table, area);
}

fn draw_calls(frame: &mut Frame, state: &WatchState, area: Rect) {
    let rows = state.calls.iter().map(|c| {
        let elapsed = elapsed_ms(c, state.now_ms);
        let progress = match progress_ratio(c) {
            Some(ratio) => bar(ratio),
            None => match c.progress.as_ref().and_then(|p| p.progress.as_ref()) {
                Some(n) => format!("{n:>width$}", width = BAR_CELLS + 5),
                None => " ".repeat(BAR_CELLS + 5),
            },
        };
        let message = c
            .progress
            .as_ref()
            .and_then(|p| p.message.as_deref())
            .map(render::clean_line)
            .unwrap_or_default();
        let state = match c.state {
            CallState::AwaitingApproval => "approval",
            CallState::Cancelling => "cancelling",
            CallState::Running => "running",
        };
        Row::new(vec![
            Cell::from(render::clean_line(c.alias.as_deref().unwrap_or("-"))),
            Cell::from(render::clean_line(&c.tool)),
            Cell::from(state),
            Cell::from(c.caller.as_str()),
            Cell::from(format!("{:.1}s", elapsed as f64 / 1000.0)),
            Cell::from(progress),
            Cell::from(message),
        ])
    });
    let table = Table::new(
        rows,
        [
            Constraint::Percentage(14),
            Constraint::Percentage(18),
            Constraint::Length(10),
            Constraint::Length(6),
            Constraint::Length(8),
            Constraint::Length((BAR_CELLS + 5) as u16),
            Constraint::Min(10),
        ],
    )
    .header(header_row([
        "ALIAS", "TOOL", "STATE", "CALLER", "ELAPSED", "PROGRESS", "MESSAGE",
    ]))
    .block(Block::bordered().title("Calls in flight"));
    frame.render_widget(table, area);
}

/// `[██████░░░░] 60%`-style bar of `ratio` (0 to 1).
pub fn bar(ratio: f64) -> String {
    let filled = ((ratio * BAR_CELLS as f64).round() as usize).min(BAR_CELLS);
    format!(
        "{}{} {:>3}%",
        "█".repeat(filled),
        "░".repeat(BAR_CELLS - filled),
        (ratio * 100.0).round() as u64
    )
}

fn draw_lines(frame: &mut Frame, area: Rect, title: &str, lines: Vec<String>) {
    // The newest lines that fit (two rows of border).
    let fit = usize::from(area.height.saturating_sub(2));
    let skip = lines.len().saturating_sub(fit);
    let text: Vec<Line> = lines
        .into_iter()
        .skip(skip)
        .map(|l| Line::from(Span::raw(l)))
        .collect();
    frame.render_widget(
        Paragraph::new(text).block(Block::bordered().title(title.to_owned())),
        area,
    );
}

/// One record of the audit panel: the cells `appduct audit` prints (time, alias, tool,
/// outcome, duration, caller), time cut to the clock.
fn audit_line(record: &audit::Record) -> String {
    let cells = audit::cells(record);
    let time = cells[0].get(11..19).unwrap_or(&cells[0]).to_owned();
    format!(
        "{time}  {}  {}  {}  {}",
        cells[1], cells[2], cells[3], cells[4]
    )
}

fn header_style() -> Style {
    Style::default()
        .fg(Color::Reset)
        .add_modifier(Modifier::BOLD)
}

fn header_row<const N: usize>(titles: [&'static str; N]) -> Row<'static> {
    Row::new(titles).style(header_style())
}
