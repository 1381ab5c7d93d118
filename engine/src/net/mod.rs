//! The network pieces more than one job uses: the one HTTP/1.1 module, blocking-socket
//! helpers of the two proxies, and reads stamped with the kernel's receive time.

pub mod http;
pub mod recv_stamp;
pub mod sockets;
