//! A request's way through the loop: dispatched to every target at its tick (or dropped at
//! `--max-in-flight`), held behind its ordering key, queued for a connection or written on
//! one, answered, retried once on a stale keep-alive connection, timed out or failed, and
//! recorded when it finishes.

use std::io::{self, Write as _};

use mio::{Interest, Token};

use super::timer::now_ns;
use super::{
    Engine, Pending, Phase, ReplayError, FIRST_CONN, MAX_GAPS, MAX_TICKS_PER_TURN, WARMUP_ID_BASE,
};
use crate::format::request_log::{ErrorKind, RequestRecord};
use crate::load::client::{connect_error_kind, Conn, ConnState, ReadOutcome, Response};
use crate::load::histogram::record_ns;
use crate::load::pace::{latency_start_ns, sends_now, Arrival, Pacer};
use crate::load::validity;

impl Engine<'_> {
    pub(super) fn dispatch_due(&mut self, pacer: &mut Pacer) -> Result<(), ReplayError> {
        // The buffer is reused because this runs on every turn of the loop.
        let mut writes = std::mem::take(&mut self.writes);
        writes.resize(self.targets.len(), None);
        let result = self.dispatch_due_into(pacer, &mut writes);
        self.writes = writes;
        result
    }

    fn dispatch_due_into(
        &mut self,
        pacer: &mut Pacer,
        writes: &mut [Option<u64>],
    ) -> Result<(), ReplayError> {
        let n_templates = self.plan.bodies.len() as u64;
        for _ in 0..MAX_TICKS_PER_TURN {
            let due = pacer.next_due_ns();
            let now = now_ns();
            if !sends_now(due, now, self.plan.coalesce_ns) {
                return Ok(());
            }
            let measured = self.phase == Phase::Measure;
            if measured && due >= self.window_end_ns {
                return Ok(());
            }
            let id = pacer.advance();
            let template = ((if measured { id } else { id - WARMUP_ID_BASE }) % n_templates) as u32;
            if measured {
                self.scheduled += 1;
                self.iv_scheduled += 1;
                if now.saturating_sub(due) > validity::LATE_NS {
                    self.behind += 1;
                    self.iv_behind += 1;
                }
                if matches!(self.plan.arrival, Arrival::Poisson { .. })
                    && self.gaps.len() < MAX_GAPS
                {
                    if let Some(prev) = self.last_tick_ns {
                        self.gaps
                            .push(now.saturating_sub(prev) as f64 * pacer.rate_per_s() / 1e9);
                    }
                    self.last_tick_ns = Some(now);
                }
            }
            let pending = Pending {
                id,
                template,
                intended_ns: due,
                sent_ns: 0,
                measured,
                retried: false,
                paced: true,
            };
            // Each write takes microseconds (loopback runs the receiver inline), so the
            // target written first gets the request earlier. Rotating who goes first makes
            // that head start the same for every arm on average instead of a bias.
            let n = writes.len();
            let first = (id % n as u64) as usize;
            for j in 0..n {
                let k = (first + j) % n;
                writes[k] = self.dispatch(k, pending)?;
            }
            if let (Some(w0), true) = (writes[first], measured) {
                for (k, w) in writes.iter().enumerate() {
                    if let (Some(w), false) = (w, k == first) {
                        record_ns(&mut self.skew, w.saturating_sub(w0).max(1));
                    }
                }
            }
        }
        Ok(())
    }

    /// Accepts a new request for target `k`; returns the write time if it went out at once.
    fn dispatch(&mut self, k: usize, p: Pending) -> Result<Option<u64>, ReplayError> {
        let t = &mut self.targets[k];
        if t.outstanding >= self.plan.max_in_flight {
            if p.measured {
                t.stats.dropped += 1;
                self.iv_dropped += 1;
                let rec = RequestRecord {
                    request_id: p.id,
                    intended_ns: p.intended_ns - self.measure_start_ns,
                    latency_ns: 0,
                    uncorrected_ns: 0,
                    bytes: 0,
                    status: 0,
                    target: k as u16,
                    endpoint: self.plan.template_endpoint[p.template as usize],
                    error: ErrorKind::Dropped,
                };
                self.write_record(&rec)?;
            }
            return Ok(None);
        }
        t.outstanding += 1;
        if let Some((keys, _)) = &self.plan.ordered_keys {
            let key = keys[p.template as usize] as usize;
            if t.key_busy[key] {
                t.key_queue[key].push_back(Pending { paced: false, ..p });
                return Ok(None);
            }
            t.key_busy[key] = true;
        }
        self.assign(k, p)
    }

    /// Puts an accepted request on a connection, or in the target's FIFO.
    pub(super) fn assign(&mut self, k: usize, p: Pending) -> Result<Option<u64>, ReplayError> {
        let t = &mut self.targets[k];
        if let Some(c) = t.idle.pop() {
            return self.send(k, c, p);
        }
        if let Some(c) = t.closed.pop() {
            self.connect(k, c, p)?;
            return Ok(None);
        }
        if p.measured {
            t.stats.queued_sends += 1;
        }
        t.queue.push_back(Pending { paced: false, ..p });
        Ok(None)
    }

    fn token(&self, k: usize, c: usize) -> Token {
        Token(FIRST_CONN + k * self.plan.connections + c)
    }

    /// Opens slot `c` for request `p`; returns false when the connect failed at once.
    fn connect(&mut self, k: usize, c: usize, p: Pending) -> Result<bool, ReplayError> {
        let token = self.token(k, c);
        let addr = self.plan.targets[k].addr;
        let timeout_ns = self.plan.timeout_ns;
        let slot = &mut self.targets[k].slots[c];
        let opened = slot
            .conn
            .open(addr)
            .and_then(|()| match slot.conn.stream.as_mut() {
                Some(s) => {
                    self.poll
                        .registry()
                        .register(s, token, Interest::READABLE | Interest::WRITABLE)
                }
                None => Err(io::Error::new(io::ErrorKind::NotConnected, "no socket")),
            });
        match opened {
            Ok(()) => {
                slot.conn.deadline_ns = now_ns() + timeout_ns;
                slot.req = Some(p);
                Ok(true)
            }
            Err(e) => {
                slot.conn.stream = None;
                slot.conn.state = ConnState::Closed;
                self.targets[k].closed.push(c);
                self.finish(k, p, Err((connect_error_kind(&e), 0)), now_ns())?;
                Ok(false)
            }
        }
    }

    fn send(&mut self, k: usize, c: usize, mut p: Pending) -> Result<Option<u64>, ReplayError> {
        let plan = self.plan;
        let window_end = self.window_end_ns;
        let slot = &mut self.targets[k].slots[c];
        let conn = &mut slot.conn;
        conn.out.clear();
        conn.out_pos = 0;
        conn.out
            .extend_from_slice(&plan.targets[k].heads[p.template as usize]);
        // `write!` into a Vec cannot fail.
        let _ = write!(conn.out, "x-hairline-request-id: {}\r\n\r\n", p.id);
        conn.out
            .extend_from_slice(&plan.bodies[p.template as usize]);
        conn.expect_response(plan.head_request[p.template as usize]);
        conn.state = ConnState::Busy;
        // The write time: uncorrected latency, dispatch skew and pacing error all start here.
        p.sent_ns = now_ns();
        conn.deadline_ns = p.sent_ns + plan.timeout_ns;
        let flushed = conn.flush();
        let paced = p.paced && !p.retried;
        p.paced = false;
        slot.req = Some(p);
        if p.measured && p.sent_ns < window_end {
            let s = &mut self.targets[k].stats;
            s.sent += 1;
            s.iv_sent += 1;
            if paced {
                let late_ns = p.sent_ns.saturating_sub(p.intended_ns);
                record_ns(&mut self.lateness, late_ns);
                if late_ns > validity::LATE_NS {
                    self.late_sends += 1;
                    self.iv_late_sends += 1;
                }
            }
        }
        match flushed {
            Ok(_) => Ok(Some(p.sent_ns)),
            Err(e) => {
                self.fail_slot(k, c, Conn::write_error_kind(&e), 0)?;
                Ok(None)
            }
        }
    }

    pub(super) fn on_conn_event(&mut self, k: usize, c: usize) -> Result<(), ReplayError> {
        let state = self.targets[k].slots[c].conn.state;
        match state {
            ConnState::Closed => Ok(()),
            ConnState::Connecting => match self.targets[k].slots[c].conn.check_connected() {
                Ok(false) => Ok(()),
                Ok(true) => {
                    let slot = &mut self.targets[k].slots[c];
                    slot.conn.state = ConnState::Idle;
                    match slot.req.take() {
                        Some(p) => self.send(k, c, p).map(|_| ()),
                        None => self.next_work_idle(k, c),
                    }
                }
                Err(e) => self.fail_slot(k, c, connect_error_kind(&e), 0),
            },
            ConnState::Idle | ConnState::Busy => {
                let slot = &mut self.targets[k].slots[c];
                if state == ConnState::Busy && slot.conn.out_pos < slot.conn.out.len() {
                    if let Err(e) = slot.conn.flush() {
                        return self.fail_slot(k, c, Conn::write_error_kind(&e), 0);
                    }
                }
                match slot.conn.read(&mut self.scratch) {
                    ReadOutcome::Pending => Ok(()),
                    ReadOutcome::Complete(r) => self.on_response(k, c, r),
                    ReadOutcome::Failed { kind, bytes_seen } => {
                        self.fail_slot(k, c, kind, bytes_seen)
                    }
                    ReadOutcome::IdleClosed => {
                        self.close_slot(k, c);
                        let t = &mut self.targets[k];
                        t.idle.retain(|&i| i != c);
                        self.next_work_closed(k, c)
                    }
                }
            }
        }
    }

    fn on_response(&mut self, k: usize, c: usize, r: Response) -> Result<(), ReplayError> {
        let now = now_ns();
        let slot = &mut self.targets[k].slots[c];
        slot.conn.served += 1;
        let req = slot.req.take();
        if r.keep_alive {
            slot.conn.state = ConnState::Idle;
        } else {
            self.close_slot(k, c);
        }
        if let Some(p) = req {
            self.finish(k, p, Ok(r), now)?;
        }
        if r.keep_alive {
            self.next_work_idle(k, c)
        } else {
            self.next_work_closed(k, c)
        }
    }

    fn close_slot(&mut self, k: usize, c: usize) {
        let registry = self.poll.registry();
        let slot = &mut self.targets[k].slots[c];
        if let Some(mut s) = slot.conn.stream.take() {
            // Deregistering a socket we are about to drop cannot matter if it fails.
            let _ = registry.deregister(&mut s);
        }
        slot.conn.state = ConnState::Closed;
    }

    /// A connection failed: its request (if any) fails with `kind` or is retried once when a
    /// reused keep-alive connection turned out to be closed by the peer.
    fn fail_slot(
        &mut self,
        k: usize,
        c: usize,
        kind: ErrorKind,
        bytes_seen: u64,
    ) -> Result<(), ReplayError> {
        let now = now_ns();
        let served = self.targets[k].slots[c].conn.served;
        let req = self.targets[k].slots[c].req.take();
        let was_idle = self.targets[k].slots[c].conn.state == ConnState::Idle;
        self.close_slot(k, c);
        if was_idle {
            self.targets[k].idle.retain(|&i| i != c);
        }
        if let Some(mut p) = req {
            let stale = served > 0
                && bytes_seen == 0
                && matches!(kind, ErrorKind::Closed | ErrorKind::Reset);
            if stale && !p.retried {
                p.retried = true;
                self.targets[k].queue.push_front(p);
            } else {
                self.finish(k, p, Err((kind, bytes_seen)), now)?;
            }
        }
        self.next_work_closed(k, c)
    }

    fn next_work_idle(&mut self, k: usize, c: usize) -> Result<(), ReplayError> {
        match self.targets[k].queue.pop_front() {
            Some(p) => self.send(k, c, p).map(|_| ()),
            None => {
                self.targets[k].idle.push(c);
                Ok(())
            }
        }
    }

    fn next_work_closed(&mut self, k: usize, c: usize) -> Result<(), ReplayError> {
        match self.targets[k].queue.pop_front() {
            // A failed connect puts the slot back on the closed list and fails that request;
            // the next queued request gets its own attempt on the next event.
            Some(p) => self.connect(k, c, p).map(|_| ()),
            None => {
                self.targets[k].closed.push(c);
                Ok(())
            }
        }
    }

    pub(super) fn sweep_timeouts(&mut self, now: u64) -> Result<(), ReplayError> {
        let timeout_ns = self.plan.timeout_ns;
        for k in 0..self.targets.len() {
            for c in 0..self.plan.connections {
                let conn = &self.targets[k].slots[c].conn;
                if matches!(conn.state, ConnState::Busy | ConnState::Connecting)
                    && now > conn.deadline_ns
                {
                    let kind = if conn.state == ConnState::Connecting {
                        ErrorKind::ConnectTimeout
                    } else {
                        ErrorKind::Timeout
                    };
                    self.fail_slot(k, c, kind, 0)?;
                }
            }
            // Requests that waited a whole timeout for a connection are not sent any more.
            while let Some(front) = self.targets[k].queue.front() {
                if front.intended_ns + timeout_ns >= now {
                    break;
                }
                if let Some(p) = self.targets[k].queue.pop_front() {
                    self.finish(k, p, Err((ErrorKind::Timeout, 0)), now)?;
                }
            }
        }
        Ok(())
    }

    pub(super) fn abandon_outstanding(
        &mut self,
        now: u64,
        kind: ErrorKind,
    ) -> Result<(), ReplayError> {
        for k in 0..self.targets.len() {
            let mut left: Vec<Pending> = Vec::new();
            for c in 0..self.plan.connections {
                if let Some(p) = self.targets[k].slots[c].req.take() {
                    left.push(p);
                }
                self.close_slot(k, c);
            }
            let t = &mut self.targets[k];
            left.extend(t.queue.drain(..));
            left.append(&mut t.key_ready);
            for q in &mut t.key_queue {
                left.extend(q.drain(..));
            }
            for p in left {
                self.finish(k, p, Err((kind, 0)), now)?;
            }
        }
        Ok(())
    }

    /// Records a finished request (response or failure) and releases its ordering key.
    fn finish(
        &mut self,
        k: usize,
        p: Pending,
        outcome: Result<Response, (ErrorKind, u64)>,
        now: u64,
    ) -> Result<(), ReplayError> {
        let plan = self.plan;
        let t = &mut self.targets[k];
        t.outstanding = t.outstanding.saturating_sub(1);
        if let Some((keys, _)) = &plan.ordered_keys {
            let key = keys[p.template as usize] as usize;
            match t.key_queue[key].pop_front() {
                Some(next) => t.key_ready.push(next),
                None => t.key_busy[key] = false,
            }
        }
        if !p.measured {
            return Ok(());
        }
        let endpoint = plan.template_endpoint[p.template as usize];
        let latency_ns = now.saturating_sub(latency_start_ns(p.intended_ns, p.sent_ns));
        let uncorrected_ns = if p.sent_ns > 0 {
            now.saturating_sub(p.sent_ns)
        } else {
            0
        };
        let (status, bytes, error) = match outcome {
            Ok(r) if r.status >= 500 => (r.status, r.bytes, ErrorKind::Http5xx),
            Ok(r) => (r.status, r.bytes, ErrorKind::None),
            Err((kind, bytes)) => (0, bytes, kind),
        };
        let s = &mut t.stats;
        s.requests += 1;
        s.iv_requests += 1;
        s.bytes += bytes;
        if status > 0 {
            *s.status.entry(status).or_insert(0) += 1;
        }
        let ep = &mut s.endpoints[endpoint as usize];
        ep.requests += 1;
        if error == ErrorKind::None {
            record_ns(&mut s.hist, latency_ns);
            record_ns(&mut s.uhist, uncorrected_ns);
            record_ns(&mut s.iv_hist, latency_ns);
            record_ns(&mut ep.hist, latency_ns);
            record_ns(&mut ep.uhist, uncorrected_ns);
        } else {
            s.errors += 1;
            s.iv_errors += 1;
            ep.errors += 1;
            s.errors_by_kind[error as usize] += 1;
        }
        let rec = RequestRecord {
            request_id: p.id,
            intended_ns: p.intended_ns.saturating_sub(self.measure_start_ns),
            latency_ns,
            uncorrected_ns,
            bytes: bytes.min(u32::MAX as u64) as u32,
            status,
            target: k as u16,
            endpoint,
            error,
        };
        self.write_record(&rec)
    }

    fn write_record(&mut self, rec: &RequestRecord) -> Result<(), ReplayError> {
        if let Some(w) = self.sinks.requests.as_mut() {
            w.write_all(&rec.to_bytes())
                .map_err(|source| ReplayError::Output {
                    what: "--requests",
                    source,
                })?;
        }
        Ok(())
    }
}
