//! Validity gates: did the run deliver the load it was asked for? A run that fails a gate
//! still reports everything, with `valid: false`, so nobody compares latencies measured
//! under a load other than the one intended.

use serde::Serialize;

/// Share of scheduled sends the engine's own pacer may take off its schedule more than
/// [`LATE_NS`] late.
pub const MAX_LATE_SHARE: f64 = 0.01;
/// A send more than this far behind its due time is late.
pub const LATE_NS: u64 = 1_000_000;
/// Allowed relative gap between achieved and scheduled rate.
pub const MAX_RATE_ERROR: f64 = 0.01;
/// Poisson arrivals are rejected when the KS test's p-value falls below this.
pub const MIN_POISSON_P: f64 = 0.001;

/// One gate's verdict. Fields in alphabetical order, as the summary writes them
/// (`load::summary`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Gate {
    pub detail: String,
    pub limit: f64,
    pub name: &'static str,
    pub passed: bool,
    pub value: f64,
}

/// Achieved versus scheduled rate, per target; the worst target decides. A run that
/// scheduled nothing (stopped during the warm-up, paused throughout) measured nothing and
/// fails it.
pub fn rate_gate(scheduled: u64, sent_per_target: &[(String, u64)]) -> Gate {
    if scheduled == 0 {
        return Gate {
            name: "rate",
            value: 1.0,
            limit: MAX_RATE_ERROR,
            passed: false,
            detail: "no request was scheduled in the measurement phase: nothing was measured"
                .into(),
        };
    }
    let mut worst = 0.0f64;
    let mut worst_name = String::new();
    for (name, sent) in sent_per_target {
        let err = if scheduled == 0 {
            0.0
        } else {
            (*sent as f64 - scheduled as f64).abs() / scheduled as f64
        };
        if err >= worst {
            worst = err;
            worst_name.clone_from(name);
        }
    }
    Gate {
        name: "rate",
        value: worst,
        limit: MAX_RATE_ERROR,
        passed: worst <= MAX_RATE_ERROR,
        detail: if worst <= MAX_RATE_ERROR {
            format!(
                "every target got its scheduled rate within {:.2}% (limit {:.0}%)",
                worst * 100.0,
                MAX_RATE_ERROR * 100.0
            )
        } else {
            format!(
                "target {worst_name} got {:.2}% off its scheduled rate (limit {:.0}%)",
                worst * 100.0,
                MAX_RATE_ERROR * 100.0
            )
        },
    }
}

/// The engine's own lateness: `late` of the `sends` it scheduled left its pacer more than
/// [`LATE_NS`] after their due time. A wait for a target (a free connection, a connect, an
/// ordering key) is the target's and not counted: the `pacing_error_us` percentiles and
/// `late_sends` keep that larger figure.
pub fn late_gate(late: u64, sends: u64) -> Gate {
    let share = if sends == 0 {
        0.0
    } else {
        late as f64 / sends as f64
    };
    Gate {
        name: "late_sends",
        value: share,
        limit: MAX_LATE_SHARE,
        passed: share <= MAX_LATE_SHARE,
        detail: format!(
            "the engine sent {late} of {sends} requests more than 1 ms after their scheduled \
             time ({:.2}%, limit {:.0}%)",
            share * 100.0,
            MAX_LATE_SHARE * 100.0
        ),
    }
}

pub fn dropped_gate(dropped: u64) -> Gate {
    Gate {
        name: "dropped",
        value: dropped as f64,
        limit: 0.0,
        passed: dropped == 0,
        detail: format!(
            "{dropped} requests dropped: the targets had --max-in-flight requests outstanding"
        ),
    }
}

/// Kolmogorov–Smirnov test of inter-send gaps, each already multiplied by the rate in force
/// (so they should be Exp(1)).
pub fn poisson_gate(normalized_gaps: &[f64]) -> Gate {
    let (d, p) = ks_exponential(normalized_gaps);
    Gate {
        name: "poisson_fit",
        value: p,
        limit: MIN_POISSON_P,
        passed: normalized_gaps.len() < 2 || p >= MIN_POISSON_P,
        detail: format!(
            "KS D = {d:.4} over {} inter-send gaps, p = {p:.4}",
            normalized_gaps.len()
        ),
    }
}

/// KS statistic of `sample` against Exp(1), and its asymptotic p-value.
pub fn ks_exponential(sample: &[f64]) -> (f64, f64) {
    let n = sample.len();
    if n == 0 {
        return (0.0, 1.0);
    }
    let mut xs: Vec<f64> = sample.iter().copied().filter(|x| x.is_finite()).collect();
    xs.sort_by(f64::total_cmp);
    let nf = xs.len() as f64;
    let mut d = 0.0f64;
    for (i, &x) in xs.iter().enumerate() {
        let f = 1.0 - (-x.max(0.0)).exp();
        d = d.max((i as f64 + 1.0) / nf - f).max(f - i as f64 / nf);
    }
    (d, kolmogorov_p(d, nf))
}

/// P(D_n > d) with Stephens' small-sample correction of the Kolmogorov distribution.
fn kolmogorov_p(d: f64, n: f64) -> f64 {
    let sqrt_n = n.sqrt();
    let lambda = (sqrt_n + 0.12 + 0.11 / sqrt_n) * d;
    if lambda < 0.2 {
        return 1.0;
    }
    let mut sum = 0.0;
    for k in 1..=100 {
        let kf = k as f64;
        let term = (-2.0 * kf * kf * lambda * lambda).exp();
        sum += if k % 2 == 1 { term } else { -term };
        if term < 1e-12 {
            break;
        }
    }
    (2.0 * sum).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::pace::exponential_gap_ns;

    #[test]
    fn exponential_gaps_pass_and_constant_gaps_fail() {
        let exp: Vec<f64> = (0..5000).map(|i| exponential_gap_ns(1, i, 1e9)).collect();
        let (d, p) = ks_exponential(&exp);
        assert!(d < 0.03 && p > 0.01, "D {d} p {p}");
        assert!(poisson_gate(&exp).passed);
        let constant = vec![1.0; 5000];
        let g = poisson_gate(&constant);
        assert!(!g.passed && g.value < 1e-6, "{g:?}");
    }

    #[test]
    fn kolmogorov_p_matches_known_quantiles() {
        // lambda = 1.358 is the classic 5% critical value.
        let n: f64 = 1e6;
        let p = kolmogorov_p(1.358 / (n.sqrt() + 0.12 + 0.11 / n.sqrt()), n);
        assert!((p - 0.05).abs() < 0.001, "p {p}");
    }

    #[test]
    fn rate_and_late_gates() {
        let ok = rate_gate(1000, &[("a".into(), 995), ("b".into(), 1000)]);
        assert!(ok.passed);
        let bad = rate_gate(1000, &[("a".into(), 1000), ("b".into(), 980)]);
        assert!(
            !bad.passed && bad.detail.contains("target b got 2.00% off"),
            "{bad:?}"
        );
        assert!(ok.detail.starts_with("every target got"), "{ok:?}");
        assert!(late_gate(10, 1000).passed);
        assert!(!late_gate(11, 1000).passed);
        assert!(!dropped_gate(1).passed);
    }

    #[test]
    fn a_run_that_scheduled_nothing_is_not_valid() {
        let nothing = rate_gate(0, &[("a".into(), 0)]);
        assert!(!nothing.passed && nothing.detail.contains("nothing was measured"));
    }
}
