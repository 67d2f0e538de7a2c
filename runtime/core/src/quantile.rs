//! The one percentile of the fleet's figures (its dumps, its metrics and its benchmarks): the
//! nearest rank, the smallest sample that at least a share `p` of the samples are at or below.

/// The nearest-rank `p` quantile of `sorted` (ascending), if it is not empty.
pub fn nearest_rank<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    let rank = (sorted.len() as f64 * p).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied()
}

/// The nearest-rank `p` quantile of `xs` (sorts them); 0 for none.
pub fn percentile(xs: &mut [f64], p: f64) -> f64 {
    xs.sort_by(f64::total_cmp);
    nearest_rank(xs, p).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_rank_is_the_smallest_sample_with_a_share_p_at_or_below_it() {
        let xs: Vec<u32> = (1..=100).collect();
        assert_eq!(nearest_rank(&xs, 0.5), Some(50));
        assert_eq!(nearest_rank(&xs, 0.99), Some(99));
        assert_eq!(nearest_rank(&xs, 1.0), Some(100));
        assert_eq!(nearest_rank(&xs, 0.0), Some(1), "the least sample, not out of range");
        assert_eq!(nearest_rank(&[7], 0.99), Some(7));
        assert_eq!(nearest_rank::<u32>(&[], 0.5), None);
        let mut ys = [3.0, 1.0, 2.0, 4.0];
        assert_eq!(percentile(&mut ys, 0.5), 2.0, "sorted first; the lower middle of an even count");
        assert_eq!(percentile(&mut [], 0.5), 0.0);
    }
}
