//! The network pieces more than one job uses: the one HTTP/1.1 module, the mio servers'
//! listener and accept loop, blocking-socket helpers of the two proxies, and reads stamped
//! with the kernel's receive time.

pub mod http;
pub mod listen;
pub mod recv_stamp;
pub mod sockets;
