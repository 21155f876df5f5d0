//! Every libc call of the agent, each behind a safe function. This is the one module of
//! the crate allowed `unsafe` (the crate root denies it), so an audit of memory safety
//! reads this folder and nothing else.
#![allow(unsafe_code)]

mod cmsg;
mod epoll;
mod host;
mod socket;

pub(crate) use cmsg::{ControlBuf, cmsgs, read_pod};
#[cfg(test)]
pub(crate) use cmsg::{Pod, pod_bytes, put_cmsg};
pub(crate) use epoll::Epoll;
#[cfg(test)]
pub(crate) use host::is_root;
pub(crate) use host::set_timer_slack;
pub(crate) use host::{hostname, interface_addresses};
pub(crate) use socket::{
    RawReceived, RecvBuffers, recv_raw, send_without_stamp, set_hardware_timestamping, setsockopt,
    sockaddr_from_bytes,
};
