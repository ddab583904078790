//! The account a process runs as, for the control pipe's identity checks (docs/state.md §S4.1):
//! the client refuses a pipe served by another account, the daemon refuses a client of another
//! account, and the pipe's DACL names the current user's SID. Also the DACL of a file or
//! directory, read and set, for the owner-only state directory (§S4.2).
//!
//! This is the one module of the workspace with `unsafe` code (Win32 calls through
//! `windows-sys`: `OpenProcess`, `OpenProcessToken`, `GetTokenInformation(TokenUser)`,
//! `ConvertSidToStringSidW`, `GetNamedSecurityInfoW`, `SetNamedSecurityInfoW` and the SDDL
//! conversions); every block states why it is sound. Handles are owned by `OwnedHandle`, so
//! they close on every path; `LocalAlloc`'d results are freed by `LocalBox`.
#![allow(unsafe_code)]

use std::io;
use std::os::windows::ffi::OsStrExt as _;
use std::os::windows::io::{AsRawHandle as _, FromRawHandle as _, OwnedHandle};
use std::path::Path;
use std::sync::OnceLock;

use windows_sys::Win32::Foundation::{HANDLE, LocalFree};
use windows_sys::Win32::Security::Authorization::{
    ConvertSecurityDescriptorToStringSecurityDescriptorW, ConvertSidToStringSidW,
    ConvertStringSecurityDescriptorToSecurityDescriptorW, GetNamedSecurityInfoW, SDDL_REVISION_1,
    SE_FILE_OBJECT, SetNamedSecurityInfoW,
};
use windows_sys::Win32::Security::{
    ACL, DACL_SECURITY_INFORMATION, GetSecurityDescriptorDacl, GetTokenInformation,
    PROTECTED_DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, TOKEN_QUERY, TOKEN_USER, TokenUser,
};
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
    // SAFETY: on success `text` is a NUL-terminated UTF-16 string allocated with LocalAlloc,
    // owned by nobody else.
    Ok(unsafe { take_local_wide(text) })
}

/// Reads and frees a NUL-terminated UTF-16 string allocated with `LocalAlloc`.
///
/// # Safety
/// `text` must be such a string, owned by the caller and not used afterwards.
unsafe fn take_local_wide(text: windows_sys::core::PWSTR) -> String {
    let mut n = 0usize;
    // SAFETY: per the contract, every index up to and including the NUL is readable.
    while unsafe { *text.add(n) } != 0 {
        n += 1;
    }
    // SAFETY: the first `n` elements were just read (see above).
    let out = String::from_utf16_lossy(unsafe { std::slice::from_raw_parts(text, n) });
    // SAFETY: LocalAlloc'd, freed once, not used afterwards (the contract).
    unsafe { LocalFree(text.cast()) };
    out
}

/// `path` as a NUL-terminated UTF-16 string; an interior NUL is an `InvalidInput` error.
fn wide_path(path: &Path) -> io::Result<Vec<u16>> {
    let mut wide: Vec<u16> = path.as_os_str().encode_wide().collect();
    if wide.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path contains a NUL character",
        ));
    }
    wide.push(0);
    Ok(wide)
}

/// A `LocalAlloc`'d security descriptor, freed on drop.
struct LocalBox(PSECURITY_DESCRIPTOR);

impl Drop for LocalBox {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the pointer came from a Win32 call that allocates with LocalAlloc and
            // hands ownership to the caller; it is freed once, here.
            unsafe { LocalFree(self.0) };
        }
    }
}

/// The DACL of the file or directory `path` in SDDL (`D:` then flags and entries, e.g.
/// `D:PAI(A;OICI;FA;;;S-1-5-21-…)`), as Windows prints it.
pub fn dacl_sddl(path: &Path) -> io::Result<String> {
    let wide = wide_path(path)?;
    let mut descriptor = LocalBox(std::ptr::null_mut());
    let mut dacl: *mut ACL = std::ptr::null_mut();
    // SAFETY: `wide` is a NUL-terminated path alive for the call; the out pointers are valid
    // places; owner, group and SACL are not requested (null). On success `descriptor` owns a
    // LocalAlloc'd descriptor (`dacl` points into it).
    let status = unsafe {
        GetNamedSecurityInfoW(
            wide.as_ptr(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &raw mut dacl,
            std::ptr::null_mut(),
            &raw mut descriptor.0,
        )
    };
    if status != 0 {
        return Err(io::Error::from_raw_os_error(status.cast_signed()));
    }
    let mut text: windows_sys::core::PWSTR = std::ptr::null_mut();
    // SAFETY: `descriptor.0` is the valid descriptor returned above; `text` is a valid place;
    // the length is not requested (null).
    if unsafe {
        ConvertSecurityDescriptorToStringSecurityDescriptorW(
            descriptor.0,
            SDDL_REVISION_1,
            DACL_SECURITY_INFORMATION,
            &raw mut text,
            std::ptr::null_mut(),
        )
    } == 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: on success `text` is a LocalAlloc'd NUL-terminated UTF-16 string we own.
    Ok(unsafe { take_local_wide(text) })
}

/// Replaces the DACL of `path` with the one in `sddl` (a `D:` string), protected from
/// inheritance when `sddl` says `P`. Windows propagates the new inheritable entries to the
/// existing children that inherit.
pub fn set_dacl(path: &Path, sddl: &str) -> io::Result<()> {
    let wide = wide_path(path)?;
    let text: Vec<u16> = sddl.encode_utf16().chain(std::iter::once(0)).collect();
    let mut descriptor = LocalBox(std::ptr::null_mut());
    // SAFETY: `text` is NUL-terminated and alive for the call; `descriptor.0` is a valid place
    // and owns the LocalAlloc'd result on success; the size is not requested (null).
    if unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(
            text.as_ptr(),
            SDDL_REVISION_1,
            &raw mut descriptor.0,
            std::ptr::null_mut(),
        )
    } == 0
    {
        return Err(io::Error::last_os_error());
    }
    let mut present = 0;
    let mut defaulted = 0;
    let mut dacl: *mut ACL = std::ptr::null_mut();
    // SAFETY: `descriptor.0` is the valid descriptor built above; the out pointers are valid
    // places. `dacl` points into the descriptor, which outlives its use below.
    if unsafe {
        GetSecurityDescriptorDacl(
            descriptor.0,
            &raw mut present,
            &raw mut dacl,
            &raw mut defaulted,
        )
    } == 0
    {
        return Err(io::Error::last_os_error());
    }
    if present == 0 || dacl.is_null() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("the descriptor {sddl} has no DACL"),
        ));
    }
    let mut info = DACL_SECURITY_INFORMATION;
    if sddl.starts_with("D:P") {
        info |= PROTECTED_DACL_SECURITY_INFORMATION;
    }
    // SAFETY: `wide` is a NUL-terminated path and `dacl` a valid ACL (inside `descriptor`),
    // both alive for the call; owner, group and SACL are not set (null).
    let status = unsafe {
        SetNamedSecurityInfoW(
            wide.as_ptr(),
            SE_FILE_OBJECT,
            info,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            dacl,
            std::ptr::null(),
        )
    };
    if status != 0 {
        return Err(io::Error::from_raw_os_error(status.cast_signed()));
    }
    Ok(())
}
