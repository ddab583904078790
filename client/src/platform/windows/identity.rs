//! The account a process runs as, for the control pipe's identity checks (docs/state.md §S4.1):
//! the client refuses a pipe served by another account, the daemon refuses a client of another
//! account, and the pipe's DACL names the current user's SID.
//!
//! This is the one module of the workspace with `unsafe` code (Win32 calls through
//! `windows-sys`: `OpenProcess`, `OpenProcessToken`, `GetTokenInformation(TokenUser)`,
//! `ConvertSidToStringSidW`); every block states why it is sound. Handles are owned by
//! `OwnedHandle`, so they close on every path.
#![allow(unsafe_code)]

use std::io;
use std::os::windows::io::{AsRawHandle as _, FromRawHandle as _, OwnedHandle};
use std::sync::OnceLock;

use windows_sys::Win32::Foundation::{HANDLE, LocalFree};
use windows_sys::Win32::Security::Authorization::ConvertSidToStringSidW;
use windows_sys::Win32::Security::{GetTokenInformation, TOKEN_QUERY, TOKEN_USER, TokenUser};
use windows_sys::Win32::System::Threading::{
    GetCurrentProcess, OpenProcess, OpenProcessToken, PROCESS_QUERY_LIMITED_INFORMATION,
};

// Tested under wine by the daemon's `control_server::pipe` tests (this crate's own test
// executable is Unix-only).

/// The SID (`S-1-5-21-…`) of the account this process runs as, read once from its token.
pub fn current_user_sid() -> io::Result<String> {
    static SID: OnceLock<String> = OnceLock::new();
    if let Some(sid) = SID.get() {
        return Ok(sid.clone());
    }
    // SAFETY: `GetCurrentProcess` has no preconditions; it returns a pseudo-handle that is
    // valid for the life of the process and must not be closed (it is not wrapped in an
    // `OwnedHandle`).
    let process = unsafe { GetCurrentProcess() };
    let sid = token_user_sid(process)?;
    Ok(SID.get_or_init(|| sid).clone())
}

/// The SID of the account process `pid` runs as.
pub fn process_user_sid(pid: u32) -> io::Result<String> {
    // SAFETY: `OpenProcess` takes plain values; a null result is an error, checked below.
    let raw = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if raw.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a valid process handle that nothing else owns; `OwnedHandle` closes it.
    let process = unsafe { OwnedHandle::from_raw_handle(raw) };
    token_user_sid(process.as_raw_handle())
}

/// Whether process `pid` runs as the same account as this process. `Err` when either cannot be
/// read (for example: the process is gone, or belongs to an account we may not query); callers
/// refuse then.
pub fn same_user(pid: u32) -> io::Result<bool> {
    Ok(process_user_sid(pid)? == current_user_sid()?)
}

/// The user SID in the token of the process behind `process`, as a string.
fn token_user_sid(process: HANDLE) -> io::Result<String> {
    let mut raw: HANDLE = std::ptr::null_mut();
    // SAFETY: `process` is a valid process handle for the duration of the call (owned by the
    // caller or the current-process pseudo-handle); `raw` is a valid place for the result.
    if unsafe { OpenProcessToken(process, TOKEN_QUERY, &raw mut raw) } == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success `raw` is a token handle that nothing else owns; `OwnedHandle` closes
    // it.
    let token = unsafe { OwnedHandle::from_raw_handle(raw) };
    let mut len = 0u32;
    // SAFETY: a size query: no buffer (null, length 0), `len` receives the size needed. It
    // fails with ERROR_INSUFFICIENT_BUFFER by design; `len` is checked instead.
    unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            TokenUser,
            std::ptr::null_mut(),
            0,
            &raw mut len,
        )
    };
    let size = usize::try_from(len).map_err(io::Error::other)?;
    if size < size_of::<TOKEN_USER>() {
        return Err(io::Error::last_os_error());
    }
    // u64 elements: aligned for TOKEN_USER (pointer-sized fields).
    let mut buf = vec![0u64; size.div_ceil(8)];
    // SAFETY: `buf` is writable for at least `len` bytes and outlives the call.
    if unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            TokenUser,
            buf.as_mut_ptr().cast(),
            len,
            &raw mut len,
        )
    } == 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success the buffer starts with a TOKEN_USER (size checked above, alignment
    // given by the u64 elements) whose `Sid` points into the same buffer, alive until the end
    // of this function.
    let user = unsafe { &*buf.as_ptr().cast::<TOKEN_USER>() };
    let mut text: windows_sys::core::PWSTR = std::ptr::null_mut();
    // SAFETY: `user.User.Sid` is a valid SID (see above); `text` is a valid place for the
    // result.
    if unsafe { ConvertSidToStringSidW(user.User.Sid, &raw mut text) } == 0 {
        return Err(io::Error::last_os_error());
    }
    let mut n = 0usize;
    // SAFETY: on success `text` is a NUL-terminated UTF-16 string (LocalAlloc'd): every index
    // up to and including the NUL is readable.
    while unsafe { *text.add(n) } != 0 {
        n += 1;
    }
    // SAFETY: the first `n` elements were just read (see above).
    let sid = String::from_utf16_lossy(unsafe { std::slice::from_raw_parts(text, n) });
    // SAFETY: `text` was allocated by `ConvertSidToStringSidW` with LocalAlloc, is freed once
    // and not used afterwards.
    unsafe { LocalFree(text.cast()) };
    Ok(sid)
}
