//! `<state>/http.token`: the bearer token of the daemon's loopback HTTP API (docs/http.md §H2.1,
//! SECURITY.md). 32 bytes of the OS CSPRNG, unpadded base64url (43 characters), in a 0600 file
//! of the user. The daemon reads it on every request, so a rotation applies to the next request
//! without a reload; `appduct http token [--rotate]` prints (and replaces) it.

use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::state_dir::{create_new, open_read};

/// The file name inside the state directory.
pub const HTTP_TOKEN_FILE: &str = "http.token";
/// Length of a token in characters: 32 bytes, unpadded base64url.
pub const TOKEN_LEN: usize = 43;

/// `<state_dir>/http.token`.
pub fn token_path(state_dir: &Path) -> PathBuf {
    state_dir.join(HTTP_TOKEN_FILE)
}

/// The token in `<state_dir>/http.token`, or `None` when the file is missing. A file that is a
/// symlink, or does not hold one well-formed token (optionally followed by a newline), is an
/// error: the HTTP API then refuses every request.
pub fn read_token(state_dir: &Path) -> io::Result<Option<String>> {
    let path = token_path(state_dir);
    let mut file = match open_read(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is not a regular file", path.display()),
        ));
    }
    let mut text = String::new();
    (&mut file)
        .take(TOKEN_LEN as u64 + 2)
        .read_to_string(&mut text)?;
    let token = text.strip_suffix('\n').unwrap_or(&text);
    if !is_well_formed(token) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} does not hold a token (rotate it with `appduct http token --rotate`)",
                path.display()
            ),
        ));
    }
    Ok(Some(token.to_owned()))
}

/// The existing token, or a new one written first.
pub fn read_or_create_token(state_dir: &Path) -> io::Result<String> {
    match read_token(state_dir)? {
        Some(token) => Ok(token),
        None => rotate_token(state_dir),
    }
}

/// Writes a new token (0600, written to a fresh temporary file then renamed over the old one,
/// so a reader sees the old or the new token) and returns it. The old token stops working.
pub fn rotate_token(state_dir: &Path) -> io::Result<String> {
    let bytes = crate::random::random_bytes::<32>().map_err(io::Error::other)?;
    let token = URL_SAFE_NO_PAD.encode(bytes);
    let path = token_path(state_dir);
    let tmp = state_dir.join(format!(".{HTTP_TOKEN_FILE}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut file = create_new(&tmp)?;
        file.write_all(token.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()?;
        std::fs::rename(&tmp, &path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map(|()| token)
}

fn is_well_formed(token: &str) -> bool {
    token.len() == TOKEN_LEN
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    #[test]
    fn created_once_then_read_then_rotated() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_token(dir.path()).unwrap(), None);
        let first = read_or_create_token(dir.path()).unwrap();
        assert_eq!(first.len(), TOKEN_LEN);
        let mode = std::fs::metadata(token_path(dir.path()))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(read_or_create_token(dir.path()).unwrap(), first);
        let second = rotate_token(dir.path()).unwrap();
        assert_ne!(second, first);
        assert_eq!(read_token(dir.path()).unwrap(), Some(second));
    }

    #[test]
    fn a_garbled_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(token_path(dir.path()), "short\n").unwrap();
        assert!(read_token(dir.path()).is_err());
    }
}
