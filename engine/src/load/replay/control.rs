//! `--control`: JSON commands on stdin (`{"rate_per_s": R}`, `{"stop": true}`), read on a
//! thread of their own and applied by the loop at its next turn.

use std::io::{self, BufRead};
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::Arc;

use mio::Waker;
use serde_json::Value;

use super::{Engine, Phase};
use crate::load::pace::{Pacer, MAX_RATE_PER_S};
use crate::load::summary::RateChange;

/// Commands read from stdin under `--control`.
#[derive(Debug, Clone, Copy)]
pub(super) enum Command {
    SetRate(f64),
    Stop,
}

impl Engine<'_> {
    /// Applies the commands that came since the last turn, in order; returns the drain
    /// deadline when one of them stopped the run.
    pub(super) fn apply_commands(
        &mut self,
        rx: &Receiver<Command>,
        pacer: &mut Pacer,
        now: u64,
    ) -> Option<u64> {
        let mut drain_deadline_ns = None;
        loop {
            match rx.try_recv() {
                Ok(Command::SetRate(r)) => {
                    self.rate_per_s = r;
                    self.rate_changes.push(RateChange {
                        at_s: self.since_measure_s(now),
                        rate_per_s: r,
                    });
                    if self.phase == Phase::Measure {
                        pacer.set_rate(now, r);
                        self.last_tick_ns = None;
                    }
                }
                Ok(Command::Stop) => {
                    if self.phase != Phase::Drain {
                        drain_deadline_ns = Some(self.begin_drain(now));
                    }
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => return drain_deadline_ns,
            }
        }
    }
}

/// Reads one JSON command per stdin line; EOF ends the reader, not the run.
pub(super) fn spawn_control_reader(waker: Arc<Waker>) -> Receiver<Command> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let stdin = io::stdin();
        for (i, line) in stdin.lock().lines().enumerate() {
            let Ok(line) = line else { break };
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            match parse_command(line) {
                Ok(cmds) => {
                    for c in cmds {
                        if tx.send(c).is_err() {
                            return;
                        }
                    }
                    // A failed wake only delays the change to the next loop turn.
                    let _ = waker.wake();
                }
                Err(msg) => eprintln!("hairline-engine: control line {}: {msg}", i + 1),
            }
        }
    });
    rx
}

fn parse_command(line: &str) -> Result<Vec<Command>, String> {
    let value: Value = serde_json::from_str(line)
        .map_err(|e| format!("not JSON ({e}); send e.g. {{\"rate_per_s\": 1500}}"))?;
    let Value::Object(obj) = value else {
        return Err("expected a JSON object".into());
    };
    let mut out = Vec::new();
    for (key, v) in &obj {
        match key.as_str() {
            "rate_per_s" => match v.as_f64() {
                Some(r) if r.is_finite() && (0.0..=MAX_RATE_PER_S).contains(&r) => {
                    out.push(Command::SetRate(r))
                }
                _ => {
                    return Err(format!(
                        "rate_per_s must be a number from 0 to {MAX_RATE_PER_S:.0} (per second, \
                         per target)"
                    ))
                }
            },
            "stop" => {
                if v.as_bool() == Some(true) {
                    out.push(Command::Stop);
                }
            }
            other => return Err(format!("unknown command {other:?}; use rate_per_s or stop")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_commands_parse_and_reject_clearly() {
        assert!(
            matches!(parse_command("{\"rate_per_s\": 1500}").as_deref(), Ok([Command::SetRate(r)]) if *r == 1500.0)
        );
        assert!(matches!(
            parse_command("{\"stop\": true}").as_deref(),
            Ok([Command::Stop])
        ));
        assert!(parse_command("{\"rate\": 3}").is_err_and(|e| e.contains("rate_per_s")));
        assert!(parse_command("{\"rate_per_s\": -1}").is_err());
        assert!(parse_command("{\"rate_per_s\": 1e12}").is_err_and(|e| e.contains("1000000")));
        assert!(parse_command("rate 5").is_err());
    }
}
