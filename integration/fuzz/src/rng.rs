//! The fuzzer's random numbers: SplitMix64, written out so that a seed
//! names the same schemas, data and queries on every machine and with
//! every version of every crate (a library generator may change its
//! stream between releases, and a seed in a bug report would then name
//! another query).

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: i64, high: i64) -> i64 {
        let span = high.abs_diff(low).saturating_add(1);
        low.wrapping_add((self.next_u64() % span.max(1)) as i64)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// A generator of its own for one part of a case, so that changing
    /// how one part draws leaves the others as they were.
    pub fn fork(&mut self) -> Rng {
        Rng::new(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_names_one_stream_and_bounds_hold() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        let drawn: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        assert_eq!(drawn, (0..5).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert_ne!(drawn[0], Rng::new(8).next_u64());
        let mut r = Rng::new(1);
        for _ in 0..1000 {
            assert!(r.below(3) < 3);
            let v = r.between(-2, 2);
            assert!((-2..=2).contains(&v));
            let w = r.between(i64::MIN, i64::MAX);
            let _ = w;
        }
    }
}
