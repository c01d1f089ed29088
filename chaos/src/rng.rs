//! The soak's seeded generator (splitmix64): the same seed gives the same plan (which operations get
//! duplicate calls, kill intervals, failure points), so a failing run can be replayed. Process timing
//! still varies between runs; the plan does not.

use std::time::Duration;

/// A small deterministic generator; not for anything secret.
#[derive(Debug, Clone)]
pub struct SoakRng(u64);

impl SoakRng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SoakRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// True with probability `p`/1000.
    pub fn per_mille(&mut self, p: u32) -> bool {
        self.below(1000) < u64::from(p)
    }

    /// A duration between `lo` and `hi` (inclusive of `lo`).
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let lo_ms = u64::try_from(lo.as_millis()).unwrap_or(u64::MAX);
        let hi_ms = u64::try_from(hi.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(lo_ms + self.below(hi_ms.saturating_sub(lo_ms).max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sequence() {
        let (mut a, mut b) = (SoakRng::new(7), SoakRng::new(7));
        let xs: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs[0], SoakRng::new(8).next_u64());
        let d = a.between(Duration::from_millis(10), Duration::from_millis(20));
        assert!(d >= Duration::from_millis(10) && d < Duration::from_millis(20));
    }
}
