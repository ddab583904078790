//! The terminal of `appduct watch` (§L23): raw mode and the alternate screen while the view
//! runs, given back on every way out — a normal return, an error, a panic (a hook restores it
//! before the panic message is printed), Ctrl-C (a key in raw mode) and SIGTERM (the loop
//! ends and this guard drops) — and for the one-time code prompt of an approval.

use std::io::{self, Stdout, Write as _};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::cursor::{Hide, Show};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};

/// Whether the terminal is in the view's mode; the panic hook restores only then.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Puts the terminal back: cooked mode, the main screen, a visible cursor. Safe to call twice.
pub fn restore() {
    if ACTIVE.swap(false, Ordering::SeqCst) {
        let _ = disable_raw_mode();
        let mut out = io::stdout();
        let _ = execute!(out, LeaveAlternateScreen, Show);
        let _ = out.flush();
    }
}

fn enter() -> io::Result<()> {
    enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    execute!(io::stdout(), EnterAlternateScreen, Hide)
}

/// The view's terminal; dropping it restores the terminal.
pub struct Screen {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl std::fmt::Debug for Screen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screen").finish_non_exhaustive()
    }
}

impl Screen {
    /// Raw mode, the alternate screen, the cursor hidden; installs the panic hook once.
    pub fn enter() -> io::Result<Self> {
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        if let Err(e) = enter() {
            restore();
            return Err(e);
        }
        match Terminal::new(CrosstermBackend::new(io::stdout())) {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }

    /// Back to the normal screen in cooked mode (for the code prompt of an approval).
    pub fn suspend(&mut self) {
        restore();
    }

    /// Into the view's mode again after [`Screen::suspend`]; the next draw repaints it all.
    pub fn resume(&mut self) -> io::Result<()> {
        enter()?;
        self.terminal.clear()
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}
