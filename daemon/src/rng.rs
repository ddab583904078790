//! Call wire ids (§D9.5) without a system call per call (issue #24): each thread that mints them
//! keeps a ChaCha20 keystream generator seeded once with 32 bytes from the OS CSPRNG
//! ([`appduct_client::random::random_bytes`]). The output stays unpredictable to anyone who does
//! not know the seed, which never leaves the process; ids that guard something more than
//! routing (session ids, claim and resume tokens, consent handles, approval ids) still come from
//! the OS CSPRNG directly.

use std::cell::RefCell;

use appduct_client::random::{RandomError, random_bytes};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::{RngCore as _, SeedableRng as _};

thread_local! {
    static RNG: RefCell<Option<ChaCha20Rng>> = const { RefCell::new(None) };
}

/// `N` bytes from this thread's ChaCha20 generator, seeded from the OS on first use.
pub fn fast_random_bytes<const N: usize>() -> Result<[u8; N], RandomError> {
    RNG.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(ChaCha20Rng::from_seed(random_bytes::<32>()?));
        }
        let Some(rng) = slot.as_mut() else {
            return Err(RandomError);
        };
        let mut bytes = [0u8; N];
        rng.fill_bytes(&mut bytes);
        Ok(bytes)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn draws_differ_within_and_between_threads() {
        let a = fast_random_bytes::<16>().unwrap();
        let b = fast_random_bytes::<16>().unwrap();
        assert_ne!(a, b);
        let c = std::thread::spawn(fast_random_bytes::<16>)
            .join()
            .unwrap()
            .unwrap();
        // Another thread has its own seed: its stream is not this thread's.
        assert!(c != a && c != b);
    }
}
