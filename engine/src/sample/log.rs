//! The sample service's request log: the tunable knobs `--log-batch N` and `--log-codec`.
//!
//! Each worker keeps the records of the requests it served in a buffer kept sorted, and
//! flushes it (encodes and "writes" it) every N requests. Inserting into the sorted buffer
//! scans it, so a request pays a cost per entry already buffered; a flush pays a fixed cost.
//! CPU per request is then about `flush / N + per_entry * (N - 1) / 2` on top of the
//! request's own work: small batches flush too often, large ones scan too much, and the
//! optimum `N* = sqrt(2 * flush / per_entry)` is interior. The codec moves it: a stronger
//! codec costs more per flush but makes entries smaller and cheaper to scan, so its optimum
//! batch is larger and its optimum cheaper. This gives the autotuner (issue #15) a real
//! interior optimum with an interaction, in deterministic work (hash-chain steps), so CPU
//! per request is the same on every run and the knee of capacity moves with it.

use crate::sample::cost::{mix64, STEPS_PER_UNIT};

/// Largest `--log-batch`: past it the scan alone costs milliseconds per request.
pub const MAX_LOG_BATCH: u32 = 65_536;

/// How a flushed batch is encoded.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogCodec {
    /// Records as they are: the cheapest flush, the widest entries.
    None,
    /// A fast codec: flushes cost 2x, entries a third to scan.
    Fast,
    /// A strong codec: flushes cost 4x, entries an eighth to scan.
    Small,
}

impl LogCodec {
    /// Hash-chain steps of one flush. `None`'s 1,280 work units (~1.3 ms) with its
    /// per-entry cost put its optimum at N = 64, the middle of 1..4096 on a log scale.
    pub fn flush_steps(self) -> u64 {
        let units = match self {
            LogCodec::None => 1_280,
            LogCodec::Fast => 2_560,
            LogCodec::Small => 5_120,
        };
        units * STEPS_PER_UNIT
    }

    /// Hash-chain steps to pass one buffered entry while inserting (0.625, ~0.21 and
    /// ~0.07 work units).
    pub fn entry_steps(self) -> u64 {
        match self {
            LogCodec::None => 160,
            LogCodec::Fast => 53,
            LogCodec::Small => 18,
        }
    }
}

/// Expected work units per request that the log adds at batch `n` (the curve the knobs
/// are tuned on; `RequestLog` does exactly this work on average).
pub fn expected_units(n: u32, codec: LogCodec) -> f64 {
    let n = f64::from(n.max(1));
    let steps = codec.flush_steps() as f64 / n + codec.entry_steps() as f64 * (n - 1.0) / 2.0;
    steps / STEPS_PER_UNIT as f64
}

/// One worker's buffer of request records.
#[derive(Debug)]
pub struct RequestLog {
    batch: usize,
    codec: LogCodec,
    /// Sorted record hashes of the requests since the last flush.
    buffer: Vec<u64>,
}

impl RequestLog {
    pub fn new(batch: u32, codec: LogCodec) -> RequestLog {
        let batch = batch.max(1) as usize;
        RequestLog {
            batch,
            codec,
            buffer: Vec::with_capacity(batch),
        }
    }

    /// Logs one request's record and returns `(folded, steps)`: a value folded from the
    /// work so that the compiler cannot skip it (the server puts it in the checksum), and
    /// the hash-chain steps the work took. With `burn` false the steps are not run, only
    /// counted (`--work sleep` sleeps them instead). The request that fills the buffer
    /// pays for its flush, as a synchronous logger's would.
    pub fn append(&mut self, record: u64, burn: bool) -> (u64, u64) {
        let record = mix64(record);
        let entry_steps = if burn { self.codec.entry_steps() } else { 0 };
        let mut acc = record;
        let mut at = self.buffer.len();
        // A linear scan, each entry passed costing the codec's steps: every entry is
        // visited, wherever the insertion point is, so the cost depends on N alone.
        for (i, &entry) in self.buffer.iter().enumerate() {
            if at == self.buffer.len() && entry > record {
                at = i;
            }
            acc = chain(acc ^ entry, entry_steps);
        }
        let mut steps = self.buffer.len() as u64 * self.codec.entry_steps();
        self.buffer.insert(at, record);
        if self.buffer.len() >= self.batch {
            let folded = self.buffer.iter().fold(acc, |a, &e| a.rotate_left(7) ^ e);
            steps += self.codec.flush_steps();
            acc = chain(folded, if burn { self.codec.flush_steps() } else { 0 });
            self.buffer.clear();
        }
        (acc, steps)
    }

    /// Entries waiting for the next flush.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }
}

/// `steps` dependent multiply-xorshift steps: the unit of the sample service's CPU work.
#[inline(never)]
fn chain(seed: u64, steps: u64) -> u64 {
    let mut x = seed;
    for _ in 0..steps {
        x = mix64(x);
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODECS: [LogCodec; 3] = [LogCodec::None, LogCodec::Fast, LogCodec::Small];

    fn best_power_of_two(codec: LogCodec) -> (u32, f64) {
        (0..=12)
            .map(|k| (1u32 << k, expected_units(1 << k, codec)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap()
    }

    #[test]
    fn each_codec_has_one_interior_optimum_and_the_codec_moves_it() {
        let best: Vec<(u32, f64)> = CODECS.iter().map(|&c| best_power_of_two(c)).collect();
        assert_eq!(best[0].0, 64);
        assert!(best[0].0 < best[1].0 && best[1].0 < best[2].0, "{best:?}");
        assert!(best[0].1 > best[1].1 && best[1].1 > best[2].1, "{best:?}");
        for &codec in &CODECS {
            // Unique: the curve falls to the optimum and rises after it.
            let curve: Vec<f64> = (0..=12).map(|k| expected_units(1 << k, codec)).collect();
            let at = curve
                .iter()
                .position(|&u| u == best_power_of_two(codec).1)
                .unwrap();
            assert!(curve[..=at].windows(2).all(|w| w[0] > w[1]), "{curve:?}");
            assert!(curve[at..].windows(2).all(|w| w[0] < w[1]), "{curve:?}");
        }
    }

    #[test]
    fn the_log_adds_the_expected_work_on_average_burnt_or_only_counted() {
        for &codec in &CODECS {
            for n in [1u32, 7, 64] {
                let (mut burnt, mut counted) =
                    (RequestLog::new(n, codec), RequestLog::new(n, codec));
                let requests = 10 * u64::from(n);
                let (mut steps, mut counted_steps) = (0u64, 0u64);
                for r in 0..requests {
                    steps += burnt.append(r, true).1;
                    counted_steps += counted.append(r, false).1;
                }
                let per_request = steps as f64 / requests as f64 / STEPS_PER_UNIT as f64;
                assert!((per_request - expected_units(n, codec)).abs() < 1e-9);
                assert_eq!(steps, counted_steps);
                assert_eq!(burnt.buffered(), 0);
            }
        }
    }

    #[test]
    fn the_buffer_stays_sorted_and_the_result_is_deterministic() {
        let run = || {
            let mut log = RequestLog::new(16, LogCodec::Fast);
            let out: Vec<u64> = (0..10u64).map(|r| log.append(r * 31, true).0).collect();
            assert!(log.buffer.windows(2).all(|w| w[0] <= w[1]));
            out
        };
        assert_eq!(run(), run());
    }
}
