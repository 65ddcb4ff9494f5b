//! Small statistics: min/median/max over repeated runs and percentiles of latency samples.

use serde::Serialize;

/// min / median / max of a figure over the repeated runs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Summary {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        Some(Summary { min: sorted[0], median, max: sorted[n - 1] })
    }
}

/// The `q`-quantile (0..=1) of sorted samples, nearest-rank.
pub fn percentile(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        let s = Summary::of(&[4.0, 1.0, 3.0, 2.0]).expect("summary");
        assert_eq!((s.min, s.median, s.max), (1.0, 2.5, 4.0));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<u64> = (1..=1000).collect();
        assert_eq!(percentile(&samples, 0.5), Some(500));
        assert_eq!(percentile(&samples, 0.99), Some(990));
        assert_eq!(percentile(&samples, 0.999), Some(999));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
