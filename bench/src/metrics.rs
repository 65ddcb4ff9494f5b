//! The gateway's own account of where an event's time goes: its Prometheus histograms of the
//! log and stream phases (`GET /metrics`), read before and after a measurement window, so the
//! difference is the window's alone. Per phase: the mean (sum / count) and a p99 estimated from
//! the buckets the way Prometheus' `histogram_quantile` does (linear within the bucket).
//!
//! The histograms are a newer part of the gateway than the tool: a phase the gateway does not
//! export is reported as "not exported", never as a failure.

use std::collections::BTreeMap;

use crate::error::{Context, Result};
use crate::http::Client;

/// The registry's prefix (`Registry::with_prefix("agui")` in the gateway's src/metrics.rs).
pub const PREFIX: &str = "agui_";

/// The phases of an event, in the order it passes them: waiting for a log writer, the
/// INSERT, the COMMIT, the NOTIFY to other instances, a stream's wake-up, its socket write.
pub const PHASES: [&str; 6] = [
    "log_queue_seconds",
    "log_write_seconds",
    "log_commit_seconds",
    "log_notify_seconds",
    "stream_wakeup_seconds",
    "stream_write_seconds",
];

/// One histogram, summed over its label sets (other than `le`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// (upper bound, cumulative count), by upper bound; `+Inf` is `f64::INFINITY`.
    pub buckets: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

impl Histogram {
    /// What was observed between `earlier` and `self`.
    pub fn since(&self, earlier: &Histogram) -> Histogram {
        let before: BTreeMap<u64, f64> = earlier.buckets.iter().map(|(le, n)| (le.to_bits(), *n)).collect();
        Histogram {
            buckets: self
                .buckets
                .iter()
                .map(|(le, n)| (*le, (n - before.get(&le.to_bits()).copied().unwrap_or(0.0)).max(0.0)))
                .collect(),
            sum: self.sum - earlier.sum,
            count: self.count - earlier.count,
        }
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }

    /// The `q`-quantile estimated from the buckets: linear between the bounds of the bucket
    /// holding the rank; in the `+Inf` bucket, the highest finite bound (a floor).
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.buckets.last().map(|(_, n)| *n).filter(|n| *n > 0.0)?;
        let rank = q * total;
        let mut lower = 0.0;
        let mut below = 0.0;
        for &(le, cumulative) in &self.buckets {
            if cumulative >= rank {
                if le.is_infinite() {
                    return Some(lower);
                }
                let inside = cumulative - below;
                let fraction = if inside > 0.0 { (rank - below) / inside } else { 1.0 };
                return Some(lower + (le - lower) * fraction);
            }
            lower = le;
            below = cumulative;
        }
        Some(lower)
    }
}

/// Every histogram of a Prometheus text exposition, by name without the prefix.
pub fn parse(text: &str) -> BTreeMap<String, Histogram> {
    let mut found: BTreeMap<String, (BTreeMap<u64, f64>, f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = match line.rsplit_once(' ') {
            Some((series, value)) => (series.trim(), value.trim()),
            None => continue,
        };
        let Ok(value) = value.parse::<f64>() else { continue };
        let (name, labels) = match series.find('{') {
            Some(i) => (&series[..i], &series[i..]),
            None => (series, ""),
        };
        let Some(name) = name.strip_prefix(PREFIX) else { continue };
        if let Some(base) = name.strip_suffix("_bucket") {
            let Some(le) = label(labels, "le") else { continue };
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::NAN) };
            if le.is_nan() {
                continue;
            }
            *found.entry(base.to_string()).or_default().0.entry(le.to_bits()).or_default() += value;
        } else if let Some(base) = name.strip_suffix("_sum") {
            found.entry(base.to_string()).or_default().1 += value;
        } else if let Some(base) = name.strip_suffix("_count") {
            found.entry(base.to_string()).or_default().2 += value;
        }
    }
    found
        .into_iter()
        .filter(|(_, (buckets, _, _))| !buckets.is_empty())
        .map(|(name, (buckets, sum, count))| {
            let mut buckets: Vec<(f64, f64)> = buckets.into_iter().map(|(le, n)| (f64::from_bits(le), n)).collect();
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            (name, Histogram { buckets, sum, count })
        })
        .collect()
}

/// The value of label `name` in `{a="x",le="0.5"}`.
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("{name}=\"");
    let at = labels.find(&key)? + key.len();
    let len = labels[at..].find('"')?;
    Some(&labels[at..at + len])
}

/// Several instances' histograms as one (bucket counts, sums and counts added; bounds are the
/// same on every instance of one binary).
pub fn merge(all: Vec<BTreeMap<String, Histogram>>) -> BTreeMap<String, Histogram> {
    let mut merged: BTreeMap<String, Histogram> = BTreeMap::new();
    for one in all {
        for (name, histogram) in one {
            let into = merged.entry(name).or_default();
            for (le, n) in histogram.buckets {
                match into.buckets.iter_mut().find(|(b, _)| b.to_bits() == le.to_bits()) {
                    Some((_, total)) => *total += n,
                    None => into.buckets.push((le, n)),
                }
            }
            into.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            into.sum += histogram.sum;
            into.count += histogram.count;
        }
    }
    merged
}

/// Reads the histograms of every gateway that has a metrics URL, merged; a gateway that does
/// not answer counts as exporting nothing (the breakdown then says "not exported").
pub async fn scrape_all(targets: &[crate::target::Target]) -> BTreeMap<String, Histogram> {
    let mut all = Vec::new();
    for target in targets {
        if let Some(url) = &target.metrics_url {
            match scrape(&target.client(), url).await {
                Ok(histograms) => all.push(histograms),
                Err(error) => eprintln!("    (metrics of {} not read: {error})", target.name),
            }
        }
    }
    merge(all)
}

/// Reads the gateway's histograms.
pub async fn scrape(client: &Client, url: &str) -> Result<BTreeMap<String, Histogram>> {
    let response = client.get(url).await?;
    if response.status != 200 {
        crate::bail!("GET {url} answered {}", response.status);
    }
    let body = response.into_bytes().await.with_context(|| format!("reading {url}"))?;
    Ok(parse(&String::from_utf8_lossy(&body)))
}

/// One phase over a window: (mean, p99) in seconds, or None when the gateway does not export
/// it (or nothing was observed in the window: count 0).
#[derive(Debug, Clone)]
pub struct Phase {
    pub name: &'static str,
    pub exported: bool,
    pub count: f64,
    pub mean: Option<f64>,
    pub p99: Option<f64>,
}

/// The phases between two scrapes.
pub fn breakdown(before: &BTreeMap<String, Histogram>, after: &BTreeMap<String, Histogram>) -> Vec<Phase> {
    PHASES
        .iter()
        .map(|&name| match (after.get(name), before.get(name)) {
            (Some(after), before) => {
                let window = after.since(&before.cloned().unwrap_or_default());
                Phase { name, exported: true, count: window.count, mean: window.mean(), p99: window.quantile(0.99) }
            }
            (None, _) => Phase { name, exported: false, count: 0.0, mean: None, p99: None },
        })
        .collect()
}

/// Adds the breakdown of a scenario's repetitions to the report: mean and p99 per phase (ms),
/// one sample per repetition; a phase the gateway does not export becomes a note.
pub fn add_breakdown(report: &mut crate::report::Report, key: &str, label: &str, repetitions: &[Vec<Phase>]) {
    let mut missing = Vec::new();
    let mut unobserved = Vec::new();
    for (index, &name) in PHASES.iter().enumerate() {
        let phases: Vec<&Phase> = repetitions.iter().filter_map(|r| r.get(index)).collect();
        if phases.is_empty() {
            continue;
        }
        if phases.iter().all(|p| !p.exported) {
            missing.push(format!("{PREFIX}{name}"));
            continue;
        }
        let ms = |v: Option<f64>| v.map(|s| s * 1000.0);
        let means: Vec<f64> = phases.iter().filter_map(|p| ms(p.mean)).collect();
        let p99s: Vec<f64> = phases.iter().filter_map(|p| ms(p.p99)).collect();
        if means.is_empty() {
            unobserved.push(format!("{PREFIX}{name}"));
            continue;
        }
        let phase = name.trim_end_matches("_seconds");
        let unit = crate::report::Unit::Ms;
        report.add(format!("{key}/where/{phase}/mean"), format!("{label}: {phase} mean"), unit, means, None);
        report.add(format!("{key}/where/{phase}/p99"), format!("{label}: {phase} p99 (buckets)"), unit, p99s, None);
    }
    if !missing.is_empty() {
        report.note(format!("{label}: not exported by this gateway: {}", missing.join(", ")));
    }
    if !unobserved.is_empty() {
        report.note(format!("{label}: exported, but nothing observed in the window: {}", unobserved.join(", ")));
    }
}

/// Prints a breakdown line (stderr, per repetition).
pub fn describe(phases: &[Phase]) -> String {
    phases
        .iter()
        .map(|p| match (p.exported, p.mean, p.p99) {
            (false, _, _) => format!("{} not exported", p.name.trim_end_matches("_seconds")),
            (true, Some(mean), Some(p99)) => format!(
                "{} mean {:.3} / p99 {:.3} ms ({:.0})",
                p.name.trim_end_matches("_seconds"),
                mean * 1000.0,
                p99 * 1000.0,
                p.count
            ),
            (true, _, _) => format!("{} none observed", p.name.trim_end_matches("_seconds")),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# TYPE agui_log_commit_seconds histogram\n\
agui_log_commit_seconds_sum 1.0\n\
agui_log_commit_seconds_count 10\n\
agui_log_commit_seconds_bucket{le=\"0.001\"} 5\n\
agui_log_commit_seconds_bucket{le=\"0.01\"} 10\n\
agui_log_commit_seconds_bucket{le=\"+Inf\"} 10\n";

    const AFTER: &str = "agui_log_commit_seconds_sum 1.5\n\
agui_log_commit_seconds_count 110\n\
agui_log_commit_seconds_bucket{le=\"0.001\"} 5\n\
agui_log_commit_seconds_bucket{le=\"0.01\"} 110\n\
agui_log_commit_seconds_bucket{le=\"+Inf\"} 110\n\
agui_stream_write_seconds_bucket{kind=\"a\",le=\"0.5\"} 1\n\
agui_stream_write_seconds_bucket{kind=\"b\",le=\"0.5\"} 2\n\
agui_stream_write_seconds_bucket{kind=\"a\",le=\"+Inf\"} 1\n\
agui_stream_write_seconds_bucket{kind=\"b\",le=\"+Inf\"} 2\n\
agui_stream_write_seconds_count{kind=\"a\"} 1\n\
agui_stream_write_seconds_count{kind=\"b\"} 2\n";

    #[test]
    fn the_window_is_the_difference_and_p99_is_interpolated_in_its_bucket() {
        let phases = breakdown(&parse(BEFORE), &parse(AFTER));
        let commit = phases.iter().find(|p| p.name == "log_commit_seconds").expect("commit");
        assert_eq!(commit.count, 100.0);
        assert!((commit.mean.expect("mean") - 0.005).abs() < 1e-12);
        // All 100 in (0.001, 0.01]: rank 99 is 99 % of the way through that bucket.
        let p99 = commit.p99.expect("p99");
        assert!((p99 - (0.001 + 0.009 * 0.99)).abs() < 1e-12, "{p99}");
        let write = phases.iter().find(|p| p.name == "stream_write_seconds").expect("write");
        assert_eq!(write.count, 3.0, "label sets are summed");
        let queue = phases.iter().find(|p| p.name == "log_queue_seconds").expect("queue");
        assert!(!queue.exported);
    }
}
