//! An opened RDMA device: the device list (with its ENOSYS case), the context and the
//! capabilities the UD transport needs.

use crate::error::VerbsError;
use crate::ffi::consts::mtu_bytes;
use crate::ffi::inline;
use crate::ffi::library::Libibverbs;
use crate::ffi::types::*;
use crate::gid::Gid;
use std::ffi::CStr;
use std::io;
use std::sync::Arc;

/// Loads libibverbs and lists the RDMA devices, failing with the reason there are none.
pub fn rdma_device_names() -> Result<Vec<String>, VerbsError> {
    device_names(&Libibverbs::load()?)
}

/// Device names from `ibv_get_device_list`, which returns NULL (errno ENOSYS), not an
/// empty list, on a kernel without the RDMA subsystem.
pub(crate) fn device_names(lib: &Libibverbs) -> Result<Vec<String>, VerbsError> {
    with_device_list(lib, |devices| {
        devices.iter().map(|&d| device_name(lib, d)).collect()
    })
}

fn with_device_list<T>(
    lib: &Libibverbs,
    f: impl FnOnce(&[*mut ibv_device]) -> T,
) -> Result<T, VerbsError> {
    let mut n: libc::c_int = 0;
    // SAFETY: valid out pointer; the list is freed below.
    let list = unsafe { (lib.ibv_get_device_list)(&mut n) };
    if list.is_null() {
        let err = io::Error::last_os_error();
        return Err(if err.raw_os_error() == Some(libc::ENOSYS) {
            VerbsError::NoRdmaSubsystem
        } else {
            VerbsError::DeviceListFailed(err)
        });
    }
    let len = usize::try_from(n).unwrap_or(0);
    // SAFETY: the list holds `n` device pointers (then a NULL).
    let devices = unsafe { std::slice::from_raw_parts(list, len) };
    let result = f(devices);
    // SAFETY: frees the list we got; opened contexts stay valid.
    unsafe { (lib.ibv_free_device_list)(list) };
    if len == 0 {
        return Err(VerbsError::NoDevices);
    }
    Ok(result)
}

fn device_name(lib: &Libibverbs, device: *mut ibv_device) -> String {
    // SAFETY: a device from the current list.
    let name = unsafe { (lib.ibv_get_device_name)(device) };
    if name.is_null() {
        return String::new();
    }
    // SAFETY: NUL-terminated name inside the device struct.
    unsafe { CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

/// Device capabilities the transport depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Valid bits of completion timestamps (0 = none).
    pub completion_timestamp_mask: u64,
    /// NIC core clock in kHz (0 = unknown).
    pub hca_core_clock_khz: u64,
    /// Largest work queue.
    pub max_qp_wr: u32,
    /// Largest CQ.
    pub max_cqe: u32,
}

/// A port's state as far as the transport cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortInfo {
    /// Active MTU in bytes (the largest UD message).
    pub active_mtu: usize,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
}

/// An open device context (closed on drop).
pub(crate) struct Device {
    pub(crate) lib: Arc<Libibverbs>,
    pub(crate) ctx: *mut ibv_context,
    pub(crate) name: String,
    pub(crate) caps: DeviceCaps,
}

impl Device {
    /// Opens the device called `name`.
    pub(crate) fn open(lib: Arc<Libibverbs>, name: &str) -> Result<Self, VerbsError> {
        let opened = with_device_list(&lib, |devices| {
            let found = devices.iter().find(|&&d| device_name(&lib, d) == name);
            match found {
                // SAFETY: a device from the live list; the context outlives the list.
                Some(&d) => Ok(unsafe { (lib.ibv_open_device)(d) }),
                None => Err(devices
                    .iter()
                    .map(|&d| device_name(&lib, d))
                    .collect::<Vec<_>>()),
            }
        })?;
        let ctx = match opened {
            Ok(ctx) if ctx.is_null() => return Err(VerbsError::last_os("ibv_open_device")),
            Ok(ctx) => ctx,
            Err(available) => {
                return Err(VerbsError::NoSuchDevice {
                    name: name.to_string(),
                    available,
                });
            }
        };
        let mut device = Device {
            lib,
            ctx,
            name: name.to_string(),
            caps: DeviceCaps {
                completion_timestamp_mask: 0,
                hca_core_clock_khz: 0,
                max_qp_wr: 0,
                max_cqe: 0,
            },
        };
        // SAFETY: all-zero is a valid value of this plain-data struct.
        let mut attr: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: live context.
        let ret = unsafe { inline::query_device_ex(&device.lib, device.ctx, &mut attr) };
        if ret != 0 {
            return Err(VerbsError::from_code("ibv_query_device_ex", ret));
        }
        device.caps = DeviceCaps {
            completion_timestamp_mask: attr.completion_timestamp_mask,
            hca_core_clock_khz: attr.hca_core_clock,
            max_qp_wr: u32::try_from(attr.orig_attr.max_qp_wr).unwrap_or(0),
            max_cqe: u32::try_from(attr.orig_attr.max_cqe).unwrap_or(0),
        };
        Ok(device)
    }

    /// `ibv_query_port`.
    pub(crate) fn port(&self, port: u8) -> Result<PortInfo, VerbsError> {
        let mut attr = ibv_port_attr::default();
        // SAFETY: live context.
        let ret = unsafe { inline::query_port(&self.lib, self.ctx, port, &mut attr) };
        if ret != 0 {
            return Err(VerbsError::from_code("ibv_query_port", ret));
        }
        Ok(PortInfo {
            active_mtu: mtu_bytes(attr.active_mtu).unwrap_or(4096),
            link_layer: attr.link_layer,
        })
    }

    /// `ibv_query_gid`: the GID the device itself has at `index`.
    pub(crate) fn gid(&self, port: u8, index: u32) -> Result<Gid, VerbsError> {
        let mut gid = ibv_gid::default();
        let index = libc::c_int::try_from(index)
            .map_err(|_| VerbsError::Config(format!("GID index {index} too large")))?;
        // SAFETY: live context, valid out pointer.
        if unsafe { (self.lib.ibv_query_gid)(self.ctx, port, index, &mut gid) } != 0 {
            return Err(VerbsError::last_os("ibv_query_gid"));
        }
        Ok(Gid(gid.raw))
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every object created on this context was destroyed before (UdTransport's Drop).
        unsafe { (self.lib.ibv_close_device)(self.ctx) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This machine has no RDMA subsystem: the exact message is asserted, for the list
    /// and for opening a device. Where one exists (an RDMA host, Soft-RoCE) the list must
    /// load and name its devices, and an absent device must be named as such.
    #[test]
    fn the_device_list_explains_why_there_are_no_devices() {
        let rdma_present = std::path::Path::new("/sys/class/infiniband_verbs").exists();
        let lib = Arc::new(Libibverbs::load().unwrap());
        let open_err = Device::open(Arc::clone(&lib), "no_such_rdma_dev")
            .err()
            .unwrap();
        match rdma_device_names() {
            Err(e) if !rdma_present => {
                assert_eq!(
                    e.to_string(),
                    "no RDMA devices: ibv_get_device_list failed with ENOSYS (the kernel has no RDMA subsystem: ib_uverbs not loaded, /sys/class/infiniband_verbs missing)"
                );
                assert!(
                    matches!(open_err, VerbsError::NoRdmaSubsystem),
                    "{open_err}"
                );
            }
            Err(VerbsError::NoDevices) => {
                assert!(rdma_present && matches!(open_err, VerbsError::NoDevices))
            }
            Ok(names) => {
                assert!(rdma_present && names.iter().all(|n| !n.is_empty()));
                assert!(
                    matches!(open_err, VerbsError::NoSuchDevice { ref available, .. } if *available == names)
                );
            }
            Err(other) => panic!("unexpected: {other}"),
        }
    }
}
