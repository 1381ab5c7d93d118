//! The targets of a load run as `--target`, `--host` and `--set-header` name them, checked,
//! and the request heads each one is sent.

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::format::trace::{is_header_value, is_token_byte, Trace, TraceRequest};
use crate::load::args::LoadArgs;
use crate::net::http::parse_http_url;

/// How a URL is written, for messages.
pub(super) const URL_EXAMPLE: &str = "http://127.0.0.1:8080";

/// One target, resolved.
#[derive(Debug, Clone)]
pub struct TargetPlan {
    pub name: String,
    pub url: String,
    pub addr: SocketAddr,
    /// Per request template: the request head up to (not including) the request-id header.
    pub heads: Vec<Vec<u8>>,
}

struct ParsedTarget {
    name: String,
    url: String,
    addr: SocketAddr,
    authority: String,
    prefix: String,
}

/// The targets in `--target` order, with the Host and extra headers each is given.
pub(super) struct Targets {
    parsed: Vec<ParsedTarget>,
    host_override: HashMap<usize, String>,
    set_headers: HashMap<usize, Vec<(String, String)>>,
}

impl Targets {
    /// Reads `--target`, `--host` and `--set-header`, pushing each problem onto `problems`.
    pub(super) fn check(args: &LoadArgs, problems: &mut Vec<String>) -> Targets {
        let mut targets: Vec<ParsedTarget> = Vec::new();
        for spec in &args.targets {
            match parse_target(spec) {
                Ok(t) => {
                    if targets.iter().any(|o| o.name == t.name) {
                        problems.push(format!("--target {spec}: the name {:?} is used twice; give each target its own name", t.name));
                    } else {
                        targets.push(t);
                    }
                }
                Err(msg) => problems.push(format!("--target {spec}: {msg}")),
            }
        }
        if targets.len() > u16::MAX as usize {
            problems.push("too many --target (at most 65535)".into());
        }
        let index_of = |name: &str| targets.iter().position(|t| t.name == name);

        let mut host_override: HashMap<usize, String> = HashMap::new();
        for spec in &args.hosts {
            match spec.split_once('=') {
                Some((name, host))
                    if !host.is_empty() && host.bytes().all(|b| b > b' ' && b != 0x7f) =>
                {
                    match index_of(name) {
                        Some(i) => {
                            host_override.insert(i, host.to_owned());
                        }
                        None => problems.push(format!("--host {spec}: no target named {name:?}")),
                    }
                }
                _ => problems.push(format!(
                    "--host {spec}: expected NAME=host, e.g. --host b=api.example.com"
                )),
            }
        }
        let mut set_headers: HashMap<usize, Vec<(String, String)>> = HashMap::new();
        for spec in &args.set_headers {
            let parsed = spec.split_once(':').and_then(|(name, rest)| {
                let (header, value) = rest.split_once('=')?;
                Some((name, header, value))
            });
            match parsed {
                Some((name, header, value))
                    if !header.is_empty()
                        && header.bytes().all(is_token_byte)
                        && is_header_value(value) =>
                {
                    if let Some(why) = engine_header(header) {
                        let fix = if header.eq_ignore_ascii_case("host") {
                            format!("write --host {name}={value}")
                        } else {
                            "leave it out".to_owned()
                        };
                        problems.push(format!("--set-header {spec}: {why}; {fix}"));
                        continue;
                    }
                    match index_of(name) {
                        Some(i) => set_headers
                            .entry(i)
                            .or_default()
                            .push((header.to_owned(), value.to_owned())),
                        None => {
                            problems.push(format!("--set-header {spec}: no target named {name:?}"))
                        }
                    }
                }
                Some((_, header, value)) if !header.is_empty() && !is_header_value(value) => {
                    problems.push(format!(
                        "--set-header {spec}: the value of {header} has a control character; \
                         a header value is text without line breaks"
                    ))
                }
                _ => problems.push(format!(
                    "--set-header {spec}: expected NAME:Header=Value with Header a token (letters, \
                     digits and !#$%&'*+-.^_`|~), e.g. --set-header b:x-shard=3"
                )),
            }
        }
        Targets {
            parsed: targets,
            host_override,
            set_headers,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.parsed.len()
    }

    /// The index of the target named `name`.
    pub(super) fn index_of(&self, name: &str) -> Option<usize> {
        self.parsed.iter().position(|t| t.name == name)
    }

    /// Each target with its request head per trace request.
    pub(super) fn into_plans(self, trace: &Trace) -> Vec<TargetPlan> {
        let Targets {
            parsed,
            host_override,
            set_headers,
        } = self;
        parsed
            .into_iter()
            .enumerate()
            .map(|(i, t)| {
                let host = host_override
                    .get(&i)
                    .cloned()
                    .unwrap_or_else(|| t.authority.clone());
                let extra = set_headers.get(&i).map(Vec::as_slice).unwrap_or(&[]);
                let heads = trace
                    .requests
                    .iter()
                    .map(|r| render_head(r, &t.prefix, &host, extra))
                    .collect();
                TargetPlan {
                    name: t.name,
                    url: t.url,
                    addr: t.addr,
                    heads,
                }
            })
            .collect()
    }
}

fn parse_target(spec: &str) -> Result<ParsedTarget, String> {
    let Some((name, url)) = spec.split_once('=') else {
        return Err("expected NAME=URL, e.g. --target a=http://127.0.0.1:8080".into());
    };
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    {
        return Err(format!(
            "target name {name:?} must be letters, digits, '_', '-' or '.'"
        ));
    }
    let parsed = parse_http_url(url).map_err(|why| format!("{why}; write e.g. {URL_EXAMPLE}"))?;
    if parsed.has_query {
        return Err("a target URL has no query; put queries in --path or the trace".into());
    }
    // The fragment is not sent, and url keeps only the path in `path_and_query`.
    let prefix = parsed.path_and_query.trim_end_matches('/').to_owned();
    Ok(ParsedTarget {
        name: name.to_owned(),
        url: url.to_owned(),
        addr: parsed.addr,
        authority: parsed.authority,
        prefix,
    })
}

/// Why a header is the engine's to write, for the headers it writes itself (None for the
/// others). A second copy from `--set-header` or a trace would make a malformed request:
/// two Hosts, or a framing that disagrees with the body sent.
pub fn engine_header(name: &str) -> Option<&'static str> {
    let why = [
        ("host", "the engine sends each target's Host itself"),
        (
            "content-length",
            "the engine frames each request's body itself (the trace's body_b64)",
        ),
        (
            "transfer-encoding",
            "the engine frames each request's body itself (the trace's body_b64)",
        ),
        (
            "connection",
            "the engine keeps its connections alive itself",
        ),
        (
            "x-hairline-request-id",
            "the engine numbers every request itself, the same on every target",
        ),
    ];
    why.iter()
        .find(|(header, _)| name.eq_ignore_ascii_case(header))
        .map(|(_, why)| *why)
}

/// The request head for one target up to the request-id header, which is added per send.
fn render_head(r: &TraceRequest, prefix: &str, host: &str, extra: &[(String, String)]) -> Vec<u8> {
    let mut head = format!(
        "{} {}{} HTTP/1.1\r\nhost: {}\r\n",
        r.method, prefix, r.path, host
    );
    // Framing and routing headers are the engine's, not the recording's.
    let ours = |name: &str| {
        engine_header(name).is_some() || extra.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    };
    for (name, value) in &r.headers {
        if !ours(name) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !r.body.is_empty() || matches!(r.method.as_str(), "POST" | "PUT" | "PATCH") {
        head.push_str(&format!("content-length: {}\r\n", r.body.len()));
    }
    head.into_bytes()
}
