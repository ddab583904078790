//! The one source of randomness: the OS CSPRNG through ring (via rustls). There is no RNG seam
//! (ARCHITECTURE.md#test-layers); tests that snapshot output redact ids and tokens instead.

use std::sync::OnceLock;

use rustls::crypto::SecureRandom;

/// The OS CSPRNG failed; no identifier, token or serial can be minted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the operating system's random number generator failed")]
pub struct RandomError;

fn system_random() -> &'static dyn SecureRandom {
    static RANDOM: OnceLock<&'static dyn SecureRandom> = OnceLock::new();
    *RANDOM.get_or_init(|| rustls::crypto::ring::default_provider().secure_random)
}

/// `N` bytes from the OS CSPRNG.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], RandomError> {
    let mut bytes = [0u8; N];
    system_random().fill(&mut bytes).map_err(|_| RandomError)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_draws_differ() {
        let a = random_bytes::<32>().unwrap();
        let b = random_bytes::<32>().unwrap();
        assert_ne!(a, b);
    }
}
