//! `record`'s flags, and the settings they become once every one is checked.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use crate::net::http::parse_http_url;
use crate::record::error::RecordError;
use crate::record::label::{parse_label_rule, Labeler};
use crate::record::line::KeySource;
use crate::record::sample::{parse_probability, parse_reservoir, SampleSpec};

/// Record production traffic: a reverse proxy that forwards every request unchanged and
/// writes a sample of them as a hairline trace.
#[derive(clap::Args, Debug, Clone)]
pub struct RecordArgs {
    /// Address to listen on, HOST:PORT; port 0 picks a free one. The first line of stdout is
    /// `listening on HOST:PORT`.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: String,
    /// The live service, http://host:port.
    #[arg(long, value_name = "URL")]
    pub upstream: String,
    /// The trace to write (JSONL, docs/trace-format.md); truncated if it exists.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Record each request with probability P, in (0, 1].
    #[arg(long, value_name = "P", conflicts_with = "reservoir")]
    pub sample: Option<f64>,
    /// Record at most K requests per interval T, spread evenly over it: e.g. 100/1s, 10/500ms.
    #[arg(long, value_name = "K/T")]
    pub reservoir: Option<String>,
    /// Apply the reservoir's K to each endpoint label separately.
    #[arg(long, requires = "reservoir")]
    pub reservoir_per_endpoint: bool,
    /// Seed of the sampling decisions (default: from the OS).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Endpoint label rule REGEX=NAME (split at the last '='); repeat, first match wins.
    #[arg(long = "label", value_name = "REGEX=NAME")]
    pub labels: Vec<String>,
    /// Label a path no rule matches with its id-like segments (numbers, UUIDs, long hex)
    /// replaced by `:id`.
    #[arg(long)]
    pub normalize_ids: bool,
    /// Record this header's value as the request's ordering key.
    #[arg(long, value_name = "NAME", conflicts_with = "key_cookie")]
    pub key_header: Option<String>,
    /// Record this cookie's value as the request's ordering key.
    #[arg(long, value_name = "NAME")]
    pub key_cookie: Option<String>,
    /// Never record this header (e.g. authorization, cookie); repeat for several.
    #[arg(long = "drop-header", value_name = "NAME")]
    pub drop_headers: Vec<String>,
    /// Also send the sampled requests to this test instance (http://host:port); its
    /// responses are discarded.
    #[arg(long, value_name = "URL")]
    pub mirror: Option<String>,
    /// Mirror every request, not only the sampled ones.
    #[arg(long, requires = "mirror")]
    pub mirror_all: bool,
    /// Requests waiting for the mirror beyond which new ones are dropped.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub mirror_queue: usize,
    /// Connections (and threads) sending to the mirror.
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub mirror_connections: usize,
    /// Connect and response timeout of a mirrored request.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub mirror_timeout_ms: u64,
    /// Path answered by the recorder itself with its counters (JSON); never forwarded.
    #[arg(long, value_name = "PATH", default_value = "/__hairline/stats")]
    pub stats_path: String,
    /// Samples waiting for the writer beyond which new ones are dropped.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub queue: usize,
    /// Bodies larger than this are forwarded but neither recorded nor mirrored.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,
    /// Time the upstream has to answer a request before the client gets a 504.
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub upstream_timeout_ms: u64,
    /// Client connections served at once; more wait in the listen backlog.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub max_connections: usize,
    /// Service name written in the trace header.
    #[arg(long, value_name = "NAME")]
    pub service: Option<String>,
}

/// Validated settings of one recording.
#[derive(Debug, Clone)]
pub struct RecordConfig {
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
    pub upstream_url: String,
    pub out: PathBuf,
    pub spec: SampleSpec,
    pub seed: Option<u64>,
    pub labels: Vec<String>,
    pub labeler: Labeler,
    pub normalize_ids: bool,
    pub key: KeySource,
    pub drop_headers: Vec<String>,
    pub mirror: Option<(SocketAddr, String)>,
    pub mirror_all: bool,
    pub mirror_queue: usize,
    pub mirror_connections: usize,
    pub mirror_timeout: Duration,
    pub stats_path: String,
    pub queue: usize,
    pub max_body_bytes: usize,
    pub upstream_timeout: Duration,
    pub max_connections: usize,
    pub service: Option<String>,
}

impl RecordArgs {
    /// Checks every flag and reports all problems at once, each naming its flag and the fix.
    pub fn validate(&self) -> Result<RecordConfig, RecordError> {
        let mut problems = Vec::new();
        let listen = resolve_listen(&self.listen)
            .map_err(|e| problems.push(e))
            .ok();
        let upstream = upstream_addr("--upstream", &self.upstream)
            .map_err(|e| problems.push(e))
            .ok();
        let mirror = self.mirror.as_ref().and_then(|m| {
            upstream_addr("--mirror", m)
                .map(|addr| (addr, m.clone()))
                .map_err(|e| problems.push(e))
                .ok()
        });
        let spec = match (&self.sample, &self.reservoir) {
            (Some(p), _) => match parse_probability(*p) {
                Ok(p) if p >= 1.0 => Some(SampleSpec::All),
                Ok(p) => Some(SampleSpec::Uniform { p }),
                Err(e) => {
                    problems.push(e);
                    None
                }
            },
            (None, Some(text)) => match parse_reservoir(text) {
                Ok((k, interval_us)) => Some(SampleSpec::Reservoir {
                    k,
                    interval_us,
                    per_endpoint: self.reservoir_per_endpoint,
                }),
                Err(e) => {
                    problems.push(e);
                    None
                }
            },
            (None, None) => Some(SampleSpec::All),
        };
        let mut rules = Vec::new();
        for text in &self.labels {
            match parse_label_rule(text) {
                Ok(rule) => rules.push(rule),
                Err(e) => problems.push(e),
            }
        }
        let token = |flag: &str, name: &str, problems: &mut Vec<String>| {
            if name.is_empty() || !name.bytes().all(crate::format::trace::is_token_byte) {
                problems.push(format!(
                    "--{flag} {name:?}: not a header or cookie name; {}, e.g. x-user-id",
                    crate::format::trace::TOKEN_RULE
                ));
            }
        };
        let key = match (&self.key_header, &self.key_cookie) {
            (Some(h), _) => {
                token("key-header", h, &mut problems);
                KeySource::Header(h.clone())
            }
            (None, Some(c)) => {
                token("key-cookie", c, &mut problems);
                KeySource::Cookie(c.clone())
            }
            (None, None) => KeySource::None,
        };
        for h in &self.drop_headers {
            token("drop-header", h, &mut problems);
        }
        if !self.stats_path.starts_with('/')
            || self.stats_path.contains('?')
            || !self.stats_path.bytes().all(|b| b > b' ' && b != 0x7f)
        {
            problems.push(format!(
                "--stats-path {:?}: write a path starting with '/' without a query or spaces, e.g. /__hairline/stats",
                self.stats_path
            ));
        }
        let positive = |flag: &str, value: u64, problems: &mut Vec<String>| {
            if value == 0 {
                problems.push(format!("--{flag} 0: write a positive number"));
            }
        };
        positive("queue", self.queue as u64, &mut problems);
        positive("mirror-queue", self.mirror_queue as u64, &mut problems);
        positive("mirror-timeout-ms", self.mirror_timeout_ms, &mut problems);
        positive(
            "upstream-timeout-ms",
            self.upstream_timeout_ms,
            &mut problems,
        );
        positive(
            "max-connections",
            self.max_connections as u64,
            &mut problems,
        );
        if !(1..=64).contains(&self.mirror_connections) {
            problems.push(format!(
                "--mirror-connections {}: write a number from 1 to 64",
                self.mirror_connections
            ));
        }
        if self.out.is_dir() {
            problems.push(format!(
                "--out {}: is a directory; write a file path such as trace.jsonl",
                self.out.display()
            ));
        } else if let Some(parent) = self.out.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.is_dir() {
                problems.push(format!(
                    "--out {}: the directory {} does not exist; create it or write elsewhere",
                    self.out.display(),
                    parent.display()
                ));
            }
        }
        match (listen, upstream, spec) {
            (Some(listen), Some(upstream), Some(spec)) if problems.is_empty() => Ok(RecordConfig {
                listen,
                upstream,
                upstream_url: self.upstream.clone(),
                out: self.out.clone(),
                spec,
                seed: self.seed,
                labels: self.labels.clone(),
                labeler: Labeler::new(rules, self.normalize_ids),
                normalize_ids: self.normalize_ids,
                key,
                drop_headers: self
                    .drop_headers
                    .iter()
                    .map(|h| h.to_ascii_lowercase())
                    .collect(),
                mirror,
                mirror_all: self.mirror_all,
                mirror_queue: self.mirror_queue,
                mirror_connections: self.mirror_connections,
                mirror_timeout: Duration::from_millis(self.mirror_timeout_ms),
                stats_path: self.stats_path.clone(),
                queue: self.queue,
                max_body_bytes: self.max_body_bytes,
                upstream_timeout: Duration::from_millis(self.upstream_timeout_ms),
                max_connections: self.max_connections,
                service: self.service.clone(),
            }),
            _ => Err(RecordError::Invalid(problems)),
        }
    }
}

fn resolve_listen(text: &str) -> Result<SocketAddr, String> {
    text.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            format!("--listen {text:?}: write HOST:PORT, e.g. 127.0.0.1:8080 or 0.0.0.0:80")
        })
}

/// `http://host:port` (no path beyond `/`, no query) to a socket address.
fn upstream_addr(flag: &str, text: &str) -> Result<SocketAddr, String> {
    let fail = |why: String| format!("{flag} {text:?}: {why}; write e.g. http://127.0.0.1:8080");
    let url = parse_http_url(text).map_err(fail)?;
    if url.path_and_query != "/" || url.has_fragment {
        return Err(fail(
            "requests are forwarded with their own path, so the URL has none".into(),
        ));
    }
    Ok(url.addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RecordArgs,
    }

    fn problems(extra: &[&str]) -> String {
        let dir = std::env::temp_dir();
        let out = dir.join("hairline-record-args-test.jsonl");
        let mut argv = vec![
            "record",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9",
            "--out",
        ];
        let out_text = out.to_string_lossy().into_owned();
        argv.push(&out_text);
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv) {
            Ok(cli) => cli
                .args
                .validate()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn good_flags_validate() {
        assert_eq!(problems(&[]), "");
        assert_eq!(
            problems(&[
                "--reservoir",
                "10/500ms",
                "--reservoir-per-endpoint",
                "--label",
                "^/a=a"
            ]),
            ""
        );
        assert_eq!(
            problems(&[
                "--sample",
                "0.5",
                "--mirror",
                "http://127.0.0.1:1",
                "--mirror-all"
            ]),
            ""
        );
    }

    #[test]
    fn bad_flags_name_the_flag() {
        for (args, flag) in [
            (vec!["--sample", "1.5"], "--sample"),
            (vec!["--sample", "0"], "--sample"),
            (vec!["--reservoir", "0/1s"], "--reservoir"),
            (vec!["--reservoir", "5/1x"], "--reservoir"),
            (vec!["--label", "(oops=x"], "--label"),
            (vec!["--upstream", "ftp://h:1"], "--upstream"),
            (
                vec!["--upstream", "http://127.0.0.1:1/prefix"],
                "--upstream",
            ),
            (vec!["--mirror", "not a url"], "--mirror"),
            (vec!["--listen", "nowhere"], "--listen"),
            (vec!["--out", "/no/such/dir/t.jsonl"], "--out"),
            (vec!["--key-header", "bad name"], "--key-header"),
            (vec!["--stats-path", "stats"], "--stats-path"),
            (vec!["--mirror-connections", "0"], "--mirror-connections"),
            (
                vec!["--sample", "0.5", "--reservoir", "1/1s"],
                "--reservoir",
            ),
            (vec!["--reservoir-per-endpoint"], "--reservoir"),
        ] {
            let message = problems(&args);
            assert!(message.contains(flag), "{args:?}: {message}");
        }
        // The rule a header name breaks is the trace format's own: a token, `_` included.
        let message = problems(&["--key-header", "x user"]);
        assert!(message.contains("a name is a token: letters, digits and !#$%&'*+-.^_`|~"));
        assert_eq!(
            problems(&["--key-header", "x_user", "--drop-header", "x_secret"]),
            ""
        );
        // Every problem is reported at once.
        let message = problems(&["--sample", "2", "--label", "x", "--stats-path", "s"]);
        assert!(
            message.contains("--sample")
                && message.contains("--label")
                && message.contains("--stats-path")
        );
    }
}
