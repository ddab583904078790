//! What differs between Unix and Windows, in one place (docs/state.md §S4): the owner and mode
//! checks of the state files, `O_NOFOLLOW`-style open flags, the effective uid, and the control
//! socket's transport (a Unix domain socket, or a named pipe on Windows).
//!
//! Call sites import `platform::fs::*` where they used `std::os::unix::fs::*`: on Unix it is
//! the standard traits themselves, on Windows stand-ins with the same method names whose
//! answers make the Unix checks pass trivially (owner = the current user, mode = 0600/0700),
//! because there the state directory's protection is the owner-only ACL it inherits from the
//! user profile (§S4.2), not mode bits.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;
