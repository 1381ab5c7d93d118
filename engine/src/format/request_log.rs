//! The `--requests` file: a 16-byte header, then one fixed 48-byte little-endian record per
//! request per target, so numpy maps it with a single structured dtype (docs/engine.md).

use std::io::{self, Write};

pub const MAGIC: &[u8; 8] = b"HLREQS\0\0";
pub const VERSION: u32 = 1;
pub const HEADER_BYTES: usize = 16;
pub const RECORD_BYTES: usize = 48;

/// Why a request failed; the code is the `error` field of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ErrorKind {
    None = 0,
    ConnectRefused = 1,
    ConnectTimeout = 2,
    ConnectError = 3,
    Reset = 4,
    Timeout = 5,
    BadResponse = 6,
    Closed = 7,
    Http5xx = 8,
    Cancelled = 9,
    Dropped = 10,
    WriteError = 11,
}

impl ErrorKind {
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::None,
        ErrorKind::ConnectRefused,
        ErrorKind::ConnectTimeout,
        ErrorKind::ConnectError,
        ErrorKind::Reset,
        ErrorKind::Timeout,
        ErrorKind::BadResponse,
        ErrorKind::Closed,
        ErrorKind::Http5xx,
        ErrorKind::Cancelled,
        ErrorKind::Dropped,
        ErrorKind::WriteError,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::None => "none",
            ErrorKind::ConnectRefused => "connect_refused",
            ErrorKind::ConnectTimeout => "connect_timeout",
            ErrorKind::ConnectError => "connect_error",
            ErrorKind::Reset => "reset",
            ErrorKind::Timeout => "timeout",
            ErrorKind::BadResponse => "bad_response",
            ErrorKind::Closed => "closed",
            ErrorKind::Http5xx => "http_5xx",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Dropped => "dropped",
            ErrorKind::WriteError => "write_error",
        }
    }
}

/// One request's outcome on one target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestRecord {
    pub request_id: u64,
    /// Intended send time, ns since the start of the measurement phase.
    pub intended_ns: u64,
    /// Completion minus intended send time (0 for a dropped request).
    pub latency_ns: u64,
    /// Completion minus actual send time (0 when nothing was sent).
    pub uncorrected_ns: u64,
    /// Response bytes received, head and body.
    pub bytes: u32,
    /// HTTP status, 0 when there was no response.
    pub status: u16,
    pub target: u16,
    pub endpoint: u16,
    pub error: ErrorKind,
}

impl RequestRecord {
    pub fn to_bytes(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[0..8].copy_from_slice(&self.request_id.to_le_bytes());
        b[8..16].copy_from_slice(&self.intended_ns.to_le_bytes());
        b[16..24].copy_from_slice(&self.latency_ns.to_le_bytes());
        b[24..32].copy_from_slice(&self.uncorrected_ns.to_le_bytes());
        b[32..36].copy_from_slice(&self.bytes.to_le_bytes());
        b[36..38].copy_from_slice(&self.status.to_le_bytes());
        b[38..40].copy_from_slice(&self.target.to_le_bytes());
        b[40..42].copy_from_slice(&self.endpoint.to_le_bytes());
        b[42] = self.error as u8;
        // Bytes 43..48 are padding (zero) so the record stays 8-byte aligned.
        b
    }
}

pub fn write_header(w: &mut impl Write) -> io::Result<()> {
    w.write_all(MAGIC)?;
    w.write_all(&VERSION.to_le_bytes())?;
    w.write_all(&(RECORD_BYTES as u32).to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_fixed_little_endian() {
        let r = RequestRecord {
            request_id: 0x0102,
            intended_ns: 3,
            latency_ns: 4,
            uncorrected_ns: 5,
            bytes: 6,
            status: 200,
            target: 1,
            endpoint: 2,
            error: ErrorKind::Http5xx,
        };
        let b = r.to_bytes();
        assert_eq!(b.len(), 48);
        assert_eq!(&b[0..8], &[2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b[8], 3);
        assert_eq!(b[16], 4);
        assert_eq!(b[24], 5);
        assert_eq!(b[32], 6);
        assert_eq!(&b[36..38], &200u16.to_le_bytes());
        assert_eq!(b[38], 1);
        assert_eq!(b[40], 2);
        assert_eq!(b[42], 8);
        assert_eq!(&b[43..], &[0; 5]);
        let mut header = Vec::new();
        write_header(&mut header).expect("vec write");
        assert_eq!(header.len(), HEADER_BYTES);
        assert_eq!(&header[12..16], &48u32.to_le_bytes());
    }

    #[test]
    fn error_codes_match_their_position() {
        for (i, k) in ErrorKind::ALL.iter().enumerate() {
            assert_eq!(*k as usize, i, "{}", k.name());
        }
    }
}
