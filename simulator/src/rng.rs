//! The seeded generator behind every probabilistic decision, and id generation.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// splitmix64: tiny, fast, and the same sequence for the same seed on every platform.
#[derive(Debug, Clone)]
pub(crate) struct SeededRng {
    state: u64,
}

impl SeededRng {
    /// A generator that yields the same sequence for the same seed.
    pub(crate) fn new(seed: u64) -> Self {
        SeededRng { state: seed }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// True with probability `per_mille / 1000`.
    pub(crate) fn per_mille(&mut self, per_mille: u32) -> bool {
        self.next_u64() % 1000 < u64::from(per_mille)
    }
}

const ID_ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Random characters in an object id after its prefix (Stripe's look: `pi_3Nxyz...`).
const ID_RANDOM_CHARS: usize = 24;

/// Issues object ids. Seeded from the operating system, not from the configured seed, so a restart on the
/// same database file never reissues an id.
#[derive(Debug)]
pub(crate) struct IdGen {
    rng: Mutex<SeededRng>,
}

impl IdGen {
    /// A generator seeded from the OS (falling back to the clock when the OS has no entropy source).
    pub(crate) fn from_os() -> Self {
        let mut buf = [0_u8; 8];
        let seed = match getrandom::fill(&mut buf) {
            Ok(()) => u64::from_le_bytes(buf),
            Err(_) => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        };
        IdGen {
            rng: Mutex::new(SeededRng::new(seed)),
        }
    }

    /// A fresh id such as `pi_...`.
    pub(crate) fn id(&self, prefix: &str) -> String {
        let mut rng = match self.rng.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let mut id = String::with_capacity(prefix.len() + 1 + ID_RANDOM_CHARS);
        id.push_str(prefix);
        id.push('_');
        for _ in 0..ID_RANDOM_CHARS {
            let i = (rng.next_u64() % ID_ALPHABET.len() as u64) as usize;
            id.push(char::from(ID_ALPHABET[i]));
        }
        id
    }
}

/// Milliseconds since the Unix epoch, from the system clock.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = SeededRng::new(7);
        let mut b = SeededRng::new(7);
        let xs: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(SeededRng::new(8).next_u64(), xs[0]);
    }

    #[test]
    fn per_mille_bounds() {
        let mut r = SeededRng::new(1);
        assert!((0..100).all(|_| !r.per_mille(0)));
        assert!((0..100).all(|_| r.per_mille(1000)));
    }

    #[test]
    fn ids_have_prefix_and_differ() {
        let g = IdGen::from_os();
        let a = g.id("pi");
        assert!(a.starts_with("pi_"));
        assert_eq!(a.len(), 3 + ID_RANDOM_CHARS);
        assert_ne!(a, g.id("pi"));
    }
}
