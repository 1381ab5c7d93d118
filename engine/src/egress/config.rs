//! `egress`'s flags, and what they become once every one is checked: the addresses, and
//! under `--http` the policy (which requests are forwarded, the synthetic answer to the
//! others).

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use crate::egress::error::EgressError;
use crate::format::output::path_problem;

/// Proxy a service's calls to one downstream, forwarding reads and answering writes itself.
#[derive(clap::Args, Debug, Clone)]
pub struct EgressArgs {
    /// Address to listen on, HOST:PORT (port 0 picks a free one); stdout's one line is
    /// `ready HOST:PORT` once it listens.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: String,
    /// The downstream service, HOST:PORT, connected from the namespace the proxy started in.
    #[arg(long, value_name = "HOST:PORT")]
    pub upstream: String,
    /// Listen inside this network namespace (e.g. /run/netns/NAME).
    #[arg(long, value_name = "FILE")]
    pub netns: Option<PathBuf>,
    /// Parse HTTP/1.1 requests: forward the `--forward` ones, answer the others here.
    #[arg(long)]
    pub http: bool,
    /// A method (GET) or one endpoint ("POST /v1/lookup"; a path ending in * is a prefix)
    /// to forward; repeat for several. Default: GET and HEAD.
    #[arg(long = "forward", value_name = "RULE", requires = "http")]
    pub forward: Vec<String>,
    /// Forward nothing: every request gets the synthetic response.
    #[arg(long, requires = "http", conflicts_with = "forward")]
    pub forward_none: bool,
    /// Status of the synthetic response to a request that is not forwarded.
    #[arg(long, value_name = "STATUS", default_value_t = 200, requires = "http")]
    pub drop_status: u16,
    /// Body of the synthetic response.
    #[arg(long, value_name = "TEXT", default_value = "{}", requires = "http")]
    pub drop_body: String,
    /// Content-Type of the synthetic response.
    #[arg(
        long,
        value_name = "TYPE",
        default_value = "application/json",
        requires = "http"
    )]
    pub drop_content_type: String,
    /// The counters as JSON, rewritten atomically every 0.5 s and at exit.
    #[arg(long, value_name = "FILE")]
    pub stats: PathBuf,
}

/// A forwarding rule: a method, or a method and a path (exact, or a prefix ending in `*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardRule {
    method: String,
    path: Option<String>,
}

impl ForwardRule {
    /// `"GET"` or `"POST /v1/lookup"`; the error says what to write instead.
    pub fn parse(text: &str) -> Result<ForwardRule, String> {
        let (method, path) = match text.split_once(' ') {
            Some((m, p)) => (m, Some(p.trim())),
            None => (text, None),
        };
        if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "--forward {text:?}: {method:?} is not a method in capitals; write e.g. GET or \"POST /v1/lookup\""
            ));
        }
        if let Some(p) = path {
            if !p.starts_with('/') || p.contains(char::is_whitespace) {
                return Err(format!(
                    "--forward {text:?}: the path must start with / and hold no spaces, e.g. \"POST /v1/lookup\""
                ));
            }
        }
        Ok(ForwardRule {
            method: method.to_owned(),
            path: path.map(str::to_owned),
        })
    }

    /// Whether a request with this method and path (no query) is forwarded.
    pub fn matches(&self, method: &str, path: &str) -> bool {
        if self.method != method {
            return false;
        }
        match &self.path {
            None => true,
            Some(p) => match p.strip_suffix('*') {
                Some(prefix) => path.starts_with(prefix),
                None => p == path,
            },
        }
    }
}

/// The synthetic answer to a request that is not forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropResponse {
    pub status: u16,
    pub body: String,
    pub content_type: String,
}

/// The validated arguments.
#[derive(Debug, Clone)]
pub struct EgressConfig {
    pub listen: SocketAddr,
    pub upstream: SocketAddr,
    pub netns: Option<PathBuf>,
    /// `None`: a plain TCP relay.
    pub http: Option<HttpPolicy>,
    pub stats: PathBuf,
}

/// What `--http` does with each request.
#[derive(Debug, Clone)]
pub struct HttpPolicy {
    pub forward: Vec<ForwardRule>,
    pub drop: DropResponse,
}

impl HttpPolicy {
    pub fn forwards(&self, method: &str, path: &str) -> bool {
        self.forward.iter().any(|r| r.matches(method, path))
    }
}

fn resolve(flag: &str, text: &str, problems: &mut Vec<String>) -> Option<SocketAddr> {
    match text.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(addr)) => Some(addr),
        _ => {
            problems.push(format!(
                "--{flag} {text:?}: not a HOST:PORT address; write e.g. 127.0.0.1:9000"
            ));
            None
        }
    }
}

impl EgressArgs {
    /// Checks every flag, reporting every problem at once.
    pub fn validate(&self) -> Result<EgressConfig, EgressError> {
        let mut problems = Vec::new();
        let listen = resolve("listen", &self.listen, &mut problems);
        let upstream = resolve("upstream", &self.upstream, &mut problems);
        let mut forward = Vec::new();
        let rules: Vec<&str> = if self.forward.is_empty() && !self.forward_none {
            vec!["GET", "HEAD"]
        } else {
            self.forward.iter().map(String::as_str).collect()
        };
        for text in rules {
            match ForwardRule::parse(text) {
                Ok(rule) => forward.push(rule),
                Err(e) => problems.push(e),
            }
        }
        // A 1xx is interim: a client would wait for a final response that never comes.
        if !(200..=599).contains(&self.drop_status) {
            problems.push(format!(
                "--drop-status {}: write a final status from 200 to 599, e.g. 200",
                self.drop_status
            ));
        }
        if self.drop_content_type.is_empty() || self.drop_content_type.contains(['\r', '\n']) {
            problems
                .push("--drop-content-type: write one header value, e.g. application/json".into());
        }
        if let Some(problem) = path_problem(&self.stats) {
            problems.push(format!("--stats {}: {problem}", self.stats.display()));
        }
        if let Some(ns) = &self.netns {
            if !ns.exists() {
                problems.push(format!(
                    "--netns {}: no such namespace file; create it with `ip netns add NAME`",
                    ns.display()
                ));
            }
        }
        match (listen, upstream) {
            (Some(listen), Some(upstream)) if problems.is_empty() => Ok(EgressConfig {
                listen,
                upstream,
                netns: self.netns.clone(),
                http: self.http.then(|| HttpPolicy {
                    forward,
                    drop: DropResponse {
                        status: self.drop_status,
                        body: self.drop_body.clone(),
                        content_type: self.drop_content_type.clone(),
                    },
                }),
                stats: self.stats.clone(),
            }),
            _ => Err(EgressError::Invalid(problems)),
        }
    }
}
