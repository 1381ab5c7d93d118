//! What the sample service answers to one request: the route, the API request's work
//! (its cost, the regression and pause knobs, the cache's round trip, the request log, the
//! op endpoints' code cache) and the response, written as HTTP/1.1.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::net::http::RequestHead;
use crate::net::recv_stamp::{self, Arrival};
use crate::sample::cache::CacheClient;
use crate::sample::cost::{self, Endpoint};
use crate::sample::log::{LogCodec, RequestLog};
use crate::sample::metrics::{Metrics, Route, Status};
use crate::sample::ops::{CodeCache, Ops, OP_PREFIX};
use crate::sample::stages::{self, Slowdowns};
use crate::sample::stall::Stall;

/// Nanoseconds `--work sleep` sleeps per work unit: about what `burn` takes for one on a
/// current x86 core, so both kinds of work give the service about the same capacity.
pub const SLEEP_NS_PER_UNIT: u64 = 1_000;

/// What a request's work units are spent on.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkKind {
    /// Burn real CPU (the default).
    Cpu,
    /// Sleep: each worker thread then behaves as a CPU of its own.
    Sleep,
}

/// Checked settings the workers share.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) warmup_s: f64,
    pub(super) regress_cpu: f64,
    pub(super) slow: Slowdowns,
    pub(super) regress_mem: u64,
    pub(super) extra_reads: u64,
    pub(super) retained_per_worker: usize,
    pub(super) work: WorkKind,
    pub(super) cache: Option<SocketAddr>,
    pub(super) log: Option<(u32, LogCodec)>,
    pub(super) stall: Option<Stall>,
    /// Ask the kernel for receive timestamps; false only under `--test-no-recv-timestamps`.
    pub(super) recv_timestamps: bool,
}

pub(super) struct Shared {
    pub(super) settings: Settings,
    pub(super) metrics: Metrics,
    pub(super) ops: Option<Ops>,
}

/// State one worker keeps between requests.
pub(super) struct WorkerState {
    pub(super) shared: Arc<Shared>,
    /// `--regress-mem` buffers kept resident, oldest first.
    pub(super) retained: VecDeque<Vec<u8>>,
    pub(super) cache: Option<CacheClient>,
    pub(super) log: Option<RequestLog>,
    /// This worker's `--code-cache`.
    pub(super) code_cache: Option<CodeCache>,
}

pub(super) struct Response {
    pub(super) status: Status,
    pub(super) content_type: &'static str,
    pub(super) body: Vec<u8>,
}

impl Response {
    pub(super) fn text(status: Status, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
        }
    }

    fn json(body: String) -> Response {
        Response {
            status: Status::Ok,
            content_type: "application/json",
            body: body.into_bytes(),
        }
    }
}

/// What an API request asks for.
#[derive(Debug, Clone, Copy)]
enum Api {
    Endpoint(Endpoint),
    Op(u32),
}

fn query_param<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then_some(v)
    })
}

impl WorkerState {
    /// Answers one request that arrived at `arrival`.
    pub(super) fn handle(&mut self, head: &RequestHead, arrival: Arrival) -> (Route, Response) {
        let (path, query) = head
            .target
            .split_once('?')
            .unwrap_or((head.target.as_str(), ""));
        let route = Route::from_path(path);
        if !matches!(head.method.as_str(), "GET" | "HEAD" | "POST") {
            return (route, Response::text(Status::MethodNotAllowed, "use GET\n"));
        }
        let api = match route {
            Route::Op => self
                .shared
                .ops
                .as_ref()
                .and_then(|ops| ops.catalog.parse_path(path))
                .map(Api::Op),
            _ => route.endpoint().map(Api::Endpoint),
        };
        if let Some(api) = api {
            let response = match self.user_of(query, head.request_id.as_deref()) {
                Ok(user) => {
                    let queue_ns = recv_stamp::unix_now_ns().saturating_sub(arrival.unix_ns);
                    self.shared.metrics.queue.observe_ns(queue_ns);
                    // Counted beside the histogram, over the same requests, so that a reader
                    // of the queue times knows which share of them started at the read.
                    if !arrival.from_kernel {
                        self.shared
                            .metrics
                            .queue_unstamped
                            .fetch_add(1, Ordering::Relaxed);
                    }
                    if let Some(stall) = self.shared.settings.stall {
                        let key = head.request_id.as_deref();
                        if stall.hits(key.unwrap_or(head.target.as_bytes())) {
                            self.shared.metrics.stalls.fetch_add(1, Ordering::Relaxed);
                            thread::sleep(stall.pause);
                        }
                    }
                    self.serve_api(api, user)
                }
                Err(message) => Response::text(Status::BadRequest, message),
            };
            return (route, response);
        }
        let settings = &self.shared.settings;
        let metrics = &self.shared.metrics;
        let response = match route {
            Route::Healthz => Response::text(Status::Ok, "ok\n"),
            Route::Warm => {
                if metrics.is_warm(settings.warmup_s) {
                    Response::text(Status::Ok, "warm\n")
                } else {
                    Response::text(Status::Unavailable, "warming up\n")
                }
            }
            Route::Metrics => Response {
                status: Status::Ok,
                content_type: "text/plain; version=0.0.4",
                body: metrics
                    .render(settings.warmup_s, settings.stall.map(|s| s.seed))
                    .into_bytes(),
            },
            Route::DebugProfile => Response::text(
                Status::Ok,
                self.shared
                    .ops
                    .as_ref()
                    .map(Ops::render_profile)
                    .unwrap_or_default(),
            ),
            // The API routes were answered above; only unknown paths reach this arm.
            Route::Other | Route::Feed | Route::Profile | Route::Search | Route::Op => {
                Response::text(Status::NotFound, format!("no such path: {path}\n"))
            }
        };
        (route, response)
    }

    fn user_of(&self, query: &str, request_id: Option<&[u8]>) -> Result<u64, String> {
        if let Some(raw) = query_param(query, "user") {
            return raw.parse::<u64>().map_err(|_| {
                format!("user must be a non-negative integer, got {raw:?}; write e.g. ?user=123\n")
            });
        }
        Ok(match request_id {
            Some(id) => cost::user_for_request_id(id),
            None => {
                let n = self
                    .shared
                    .metrics
                    .anonymous
                    .fetch_add(1, Ordering::Relaxed);
                cost::zipf_user(cost::mix64(n), cost::USERS, cost::ZIPF_S)
            }
        })
    }

    fn serve_api(&mut self, api: Api, user: u64) -> Response {
        if let Some(cache) = &mut self.cache {
            let started = Instant::now();
            let outcome = cache.get(&format!("user:{user}"));
            let metrics = &self.shared.metrics;
            metrics.cache_wait.observe_ns(elapsed_ns(started));
            if let Err(e) = outcome {
                metrics
                    .cache_errors
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Response::text(
                    Status::Unavailable,
                    format!("the cache cannot be reached: {e}\n"),
                );
            }
        }
        let settings = &self.shared.settings;
        let metrics = &self.shared.metrics;
        let work_started = Instant::now();
        let first = *metrics.first_api_request.get_or_init(Instant::now);
        let warm = cost::warmup_factor(first.elapsed().as_secs_f64(), settings.warmup_s);
        let (label, base, reads, memory_factor, miss_units) = match api {
            Api::Endpoint(e) => (
                Cow::Borrowed(e.path()),
                cost::base_units(e, user),
                e.downstream_reads() + settings.extra_reads,
                e.memory_factor(),
                0,
            ),
            Api::Op(k) => {
                // `handle` makes an `Api::Op` only when there are ops.
                let Some(ops) = self.shared.ops.as_ref() else {
                    return Response::text(Status::NotFound, "no op endpoints: pass --ops N\n");
                };
                let cost = ops.run(k, self.code_cache.as_mut());
                metrics
                    .code_cache_lookups
                    .fetch_add(cost.lookups, Ordering::Relaxed);
                metrics
                    .code_cache_misses
                    .fetch_add(cost.misses, Ordering::Relaxed);
                let path = format!("{}{k}", OP_PREFIX);
                (
                    Cow::Owned(path),
                    cost.units as f64,
                    0,
                    1,
                    cost.misses * ops.miss_units,
                )
            }
        };
        let units = cost::effective_units(base, warm, settings.regress_cpu, reads);
        let checksum = match settings.work {
            WorkKind::Cpu => stages::run(user, units, &settings.slow),
            WorkKind::Sleep => {
                let slept = (units as f64 * settings.slow.factor()).round() as u64;
                thread::sleep(Duration::from_nanos(
                    slept.saturating_mul(SLEEP_NS_PER_UNIT),
                ));
                cost::mix64(user ^ units)
            }
        };
        // A miss models a JIT's recompilation, which costs CPU whatever the work kind.
        let checksum = if miss_units > 0 {
            cost::burn(checksum, miss_units)
        } else {
            checksum
        };
        let checksum = match &mut self.log {
            None => checksum,
            Some(log) => {
                let (folded, steps) = log.append(user ^ units, settings.work == WorkKind::Cpu);
                if settings.work == WorkKind::Sleep {
                    thread::sleep(Duration::from_nanos(
                        steps.saturating_mul(SLEEP_NS_PER_UNIT) / cost::STEPS_PER_UNIT,
                    ));
                }
                checksum ^ folded
            }
        };

        // Memory scales with the base cost, not the warm-up or CPU knob, so the knobs stay
        // independent of each other.
        let bytes = (base.round() as u64) * cost::BYTES_PER_UNIT * memory_factor;
        let mut scratch = vec![0u8; usize::try_from(bytes).unwrap_or(usize::MAX / 2)];
        let mut folded = cost::touch(&mut scratch, checksum);
        drop(scratch);
        if settings.regress_mem > 0 {
            let mut extra =
                vec![0u8; usize::try_from(settings.regress_mem).unwrap_or(usize::MAX / 2)];
            folded ^= cost::touch(&mut extra, checksum);
            if settings.retained_per_worker > 0 {
                if self.retained.len() >= settings.retained_per_worker {
                    self.retained.pop_front();
                }
                self.retained.push_back(extra);
            }
        }

        metrics.work.observe_ns(elapsed_ns(work_started));
        if let Api::Endpoint(e) = api {
            metrics.reads[e.index()].fetch_add(reads, Ordering::Relaxed);
        }
        let units = units + miss_units;
        metrics.work_units.fetch_add(units, Ordering::Relaxed);
        Response::json(format!(
            "{{\"endpoint\":\"{label}\",\"user\":{user},\"work_units\":{units},\"downstream_reads\":{reads},\"checksum\":\"{:016x}\"}}\n",
            std::hint::black_box(folded),
        ))
    }
}

fn elapsed_ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

pub(super) fn write_response(
    out: &mut Vec<u8>,
    response: &Response,
    head_only: bool,
    keep_alive: bool,
) {
    let _ = write!(
        out,
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}\r\n",
        response.status.code(),
        response.status.reason(),
        response.content_type,
        response.body.len(),
        if keep_alive {
            ""
        } else {
            "Connection: close\r\n"
        },
    );
    if !head_only {
        out.extend_from_slice(&response.body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_params_are_found_by_name() {
        assert_eq!(query_param("a=1&user=42", "user"), Some("42"));
        assert_eq!(query_param("users=1", "user"), None);
    }
}
