//! The figures of a run (one sample per repetition, summarised as min/median/max), each
//! throughput also as a ratio of the raw database limit measured in the same run, and the
//! issue's targets judged on the medians. Printed as Markdown tables; optionally saved as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::stats::Summary;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Unit {
    /// events or rows per second
    PerSec,
    Ms,
    /// % of one core
    Core,
    KiB,
    /// microseconds (CPU time per event)
    Us,
    /// a plain number: a ratio or a count (× for ratios, e.g. full ÷ empty)
    Times,
}

impl Unit {
    fn label(self) -> &'static str {
        match self {
            Unit::PerSec => "/s",
            Unit::Ms => "ms",
            Unit::Core => "% core",
            Unit::KiB => "KiB",
            Unit::Us => "µs",
            Unit::Times => "×",
        }
    }

    fn format(self, value: f64) -> String {
        match self {
            Unit::PerSec => group_thousands(value.round() as u64),
            Unit::Ms if value < 10.0 => format!("{value:.2}"),
            Unit::Ms => format!("{value:.1}"),
            Unit::Core => format!("{value:.0}"),
            Unit::KiB => format!("{value:.1}"),
            Unit::Us => format!("{value:.2}"),
            Unit::Times => format!("{value:.2}"),
        }
    }
}

/// 1234567 → "1,234,567".
// `is_multiple_of` is newer than the workspace's rust-version (1.85).
#[allow(clippy::manual_is_multiple_of)]
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub key: String,
    pub label: String,
    pub unit: Unit,
    pub samples: Vec<f64>,
    pub summary: Option<Summary>,
    /// Key of the raw-limit figure this one is printed as a ratio of.
    pub reference: Option<String>,
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub figures: Vec<Figure>,
    pub targets: Vec<Verdict>,
    /// What a run could not measure, in words (e.g. a histogram the gateway does not export).
    pub notes: Vec<String>,
}

/// A target of the issue and how this run fared.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub target: String,
    pub measured: String,
    pub met: Option<bool>,
}

enum Check {
    /// figure ≥ k × reference
    AtLeastTimes { figure: String, reference: String, k: f64 },
    /// figure ≤ limit
    AtMost { figure: String, limit: f64 },
}

impl Report {
    pub fn add(
        &mut self,
        key: impl Into<String>,
        label: impl Into<String>,
        unit: Unit,
        samples: Vec<f64>,
        reference: Option<String>,
    ) {
        let summary = Summary::of(&samples);
        self.figures.push(Figure { key: key.into(), label: label.into(), unit, samples, summary, reference });
    }

    /// Records a note once (repetitions and transports may find the same thing).
    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    fn median(&self, key: &str) -> Option<f64> {
        self.figures.iter().find(|f| f.key == key).and_then(|f| f.summary).map(|s| s.median)
    }

    fn figure(&self, key: &str) -> Option<&Figure> {
        self.figures.iter().find(|f| f.key == key)
    }

    /// The figures as a Markdown table.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| figure | unit | min | median | max | runs | ratio (median) |\n|---|---|---:|---:|---:|---:|---|\n",
        );
        for figure in &self.figures {
            let Some(s) = figure.summary else { continue };
            let ratio = figure
                .reference
                .as_deref()
                .and_then(|r| Some((self.median(r)?, self.figure(r)?)))
                .map(|(reference, f)| format!("{:.2} × {}", s.median / reference, f.label))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                figure.label,
                figure.unit.label(),
                figure.unit.format(s.min),
                figure.unit.format(s.median),
                figure.unit.format(s.max),
                figure.samples.len(),
                ratio
            );
        }
        out
    }

    /// Judges the targets on the medians (those whose figures this run measured).
    /// `include_unmeasured`: list targets whose figures this run lacks (a full run whose
    /// scenario failed) as not measured.
    pub fn judge(&mut self, include_unmeasured: bool, waiting_turns: u64) {
        let pg = "gateway/postgres";
        let lite = "gateway/sqlite";
        // The targets of the scale work (ratios within one run); the SQLite lines are the same
        // targets where the store has them, for comparison.
        let waiting = format!("{pg}/waiting-{waiting_turns}");
        let mut checks: Vec<(String, Check)> = vec![
            (
                "ticking 1,000 × 10/s, Postgres: p99 append→receive ≤ 5 ms".into(),
                Check::AtMost { figure: format!("{pg}/ticking/p99"), limit: 5.0 },
            ),
            (
                "ticking 1,000 × 10/s, Postgres: gateway CPU ≤ 40 % of a core".into(),
                Check::AtMost { figure: format!("{pg}/ticking/cpu/server"), limit: 40.0 },
            ),
            (
                "fan-in of 100 turns, Postgres: ≥ 50 % of raw 8-connection batch-1000".into(),
                Check::AtLeastTimes {
                    figure: format!("{pg}/fan-in"),
                    reference: "postgres/raw/b1000/c8".into(),
                    k: 0.5,
                },
            ),
            (
                "burst, one turn, Postgres: ≥ 1.5 × raw 1-connection batch-100".into(),
                Check::AtLeastTimes { figure: format!("{pg}/burst"), reference: "postgres/raw/b100/c1".into(), k: 1.5 },
            ),
            (
                "burst, one turn, Postgres (durable): ≥ 3 × the Python stack".into(),
                Check::AtLeastTimes { figure: format!("{pg}/burst"), reference: "python/burst".into(), k: 3.0 },
            ),
            (
                format!(
                    "{} running turns waiting on one instance, Postgres: ≤ 2 lease writes/s in total",
                    group_thousands(waiting_turns)
                ),
                Check::AtMost { figure: format!("{waiting}/updates"), limit: 2.0 },
            ),
            (
                format!(
                    "{} running turns waiting on one instance, Postgres: RSS ≤ 24 KiB per stream",
                    group_thousands(waiting_turns)
                ),
                Check::AtMost { figure: format!("{waiting}/rss-per-turn"), limit: 24.0 },
            ),
        ];
        for (gw, store) in [(pg, "Postgres"), (lite, "SQLite")] {
            checks.extend(store_checks(gw, store));
        }
        checks.extend([
            (
                "ticking 1,000 × 10/s, SQLite: p99 append→receive ≤ 5 ms".into(),
                Check::AtMost { figure: format!("{lite}/ticking/p99"), limit: 5.0 },
            ),
            (
                "burst, one turn, SQLite: ≥ 1.5 × raw 100-rows-per-transaction".into(),
                Check::AtLeastTimes { figure: format!("{lite}/burst"), reference: "sqlite/raw/b100/c1".into(), k: 1.5 },
            ),
            (
                "burst, one turn, SQLite (durable): ≥ 3 × the Python stack".into(),
                Check::AtLeastTimes { figure: format!("{lite}/burst"), reference: "python/burst".into(), k: 3.0 },
            ),
        ]);
        self.targets = checks
            .into_iter()
            .filter_map(|(target, check)| match self.verdict(target.clone(), &check) {
                Some(verdict) => Some(verdict),
                None if include_unmeasured => {
                    Some(Verdict { target, measured: "not measured (see the failures)".into(), met: None })
                }
                None => None,
            })
            .collect();
    }

    fn verdict(&self, target: String, check: &Check) -> Option<Verdict> {
        match check {
            Check::AtLeastTimes { figure, reference, k } => {
                let value = self.median(figure)?;
                let reference_value = self.median(reference)?;
                let unit = self.figure(figure)?.unit;
                let ratio = value / reference_value;
                Some(Verdict {
                    target,
                    measured: format!(
                        "{} {} vs {} {} = {:.2} × (needs {k})",
                        unit.format(value),
                        unit.label(),
                        unit.format(reference_value),
                        unit.label(),
                        ratio
                    ),
                    met: Some(ratio >= *k),
                })
            }
            Check::AtMost { figure, limit } => {
                let value = self.median(figure)?;
                let unit = self.figure(figure)?.unit;
                Some(Verdict {
                    target,
                    measured: format!("{} {}", unit.format(value), unit.label()),
                    met: Some(value <= *limit),
                })
            }
        }
    }

    pub fn targets_table(&self) -> String {
        let mut out = String::from("| target | measured (median) | |\n|---|---|---|\n");
        for verdict in &self.targets {
            let met = match verdict.met {
                Some(true) => "met",
                Some(false) => "**missed**",
                None => "n/a",
            };
            let _ = writeln!(out, "| {} | {} | {met} |", verdict.target, verdict.measured);
        }
        out
    }
}

/// The targets judged alike on each store (`gw` like "gateway/postgres", `store` its name in
/// the target's label).
fn store_checks(gw: &str, store: &str) -> Vec<(String, Check)> {
    vec![
        // Issue 24: what relaying an upstream AG-UI server costs.
        (
            format!("upstream relay, {store}: through the gateway ≥ 0.8 × the direct rate"),
            Check::AtLeastTimes {
                figure: format!("{gw}/upstream/through/rate"),
                reference: format!("{gw}/upstream/direct/rate"),
                k: 0.8,
            },
        ),
        (
            format!("upstream relay, {store}: the gateway adds ≤ 2 ms p99 per event (paced run)"),
            Check::AtMost { figure: format!("{gw}/upstream/added/p99"), limit: 2.0 },
        ),
        (
            format!("replay of 10,000 events, {store}: first event ≤ 5 ms"),
            Check::AtMost { figure: format!("{gw}/replay/first"), limit: 5.0 },
        ),
        (
            format!("replay of 10,000 events, {store}: last event ≤ 25 ms"),
            Check::AtMost { figure: format!("{gw}/replay/last"), limit: 25.0 },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_targets_use_medians() {
        let mut report = Report::default();
        report.add("postgres/raw/b100/c1", "raw", Unit::PerSec, vec![100.0, 120.0, 110.0], None);
        report.add(
            "gateway/postgres/burst",
            "burst",
            Unit::PerSec,
            vec![50.0, 60.0, 70.0],
            Some("postgres/raw/b100/c1".into()),
        );
        report.judge(false, 10_000);
        assert!(report.table().contains("0.55 × raw"));
        assert_eq!(report.targets.len(), 1);
        // The burst target is 1.5 × raw: 0.55 × misses it.
        assert_eq!(report.targets[0].met, Some(false));
        assert_eq!(group_thousands(1234567), "1,234,567");
    }
}
