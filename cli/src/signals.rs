//! Interrupts as the commands see them (§L4, §S3.6): SIGINT and SIGTERM, and SIGHUP for
//! `daemon run`. Once a command listens, the default action (dying by the signal) is replaced,
//! so each command decides its own exit status.

use std::io;

#[cfg(unix)]
use tokio::signal::unix::{Signal, SignalKind, signal};
#[cfg(windows)]
use tokio::signal::windows::{CtrlBreak, CtrlC, CtrlClose, ctrl_break, ctrl_c, ctrl_close};

/// Which signal arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interrupt {
    Int,
    Term,
    Hup,
}

/// Exit status of a command ended by SIGINT or SIGTERM (§L4).
pub const INTERRUPTED: u8 = 130;

/// SIGINT and SIGTERM, and SIGHUP when asked. Must be created inside a tokio runtime.
#[cfg(unix)]
#[derive(Debug)]
pub struct Interrupts {
    int: Signal,
    term: Signal,
    hup: Option<Signal>,
}

#[cfg(unix)]
impl Interrupts {
    pub fn new(with_hup: bool) -> io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: if with_hup {
                Some(signal(SignalKind::hangup())?)
            } else {
                None
            },
        })
    }

    /// The next signal.
    pub async fn recv(&mut self) -> Interrupt {
        let Self { int, term, hup } = self;
        let hup = async {
            match hup {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = int.recv() => Interrupt::Int,
            _ = term.recv() => Interrupt::Term,
            _ = hup => Interrupt::Hup,
        }
    }
}

/// Windows (docs/state.md §S4.3): Ctrl-C is `Int`; Ctrl-Break and closing the console are
/// `Term`. There is no SIGHUP: `with_hup` is ignored (`appduct daemon reload` reloads).
#[cfg(windows)]
#[derive(Debug)]
pub struct Interrupts {
    int: CtrlC,
    term: CtrlBreak,
    /// `None` without a console (a spawned daemon has none).
    close: Option<CtrlClose>,
}

#[cfg(windows)]
impl Interrupts {
    pub fn new(_with_hup: bool) -> io::Result<Self> {
        Ok(Self {
            int: ctrl_c()?,
            term: ctrl_break()?,
            close: ctrl_close().ok(),
        })
    }

    /// The next interrupt.
    pub async fn recv(&mut self) -> Interrupt {
        let Self { int, term, close } = self;
        let close = async {
            match close {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = int.recv() => Interrupt::Int,
            _ = term.recv() => Interrupt::Term,
            _ = close => Interrupt::Term,
        }
    }
}
