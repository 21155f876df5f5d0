//! libibverbs loaded at run time with `dlopen`, so a binary built with this crate
//! starts on hosts without rdma-core and only fails, with a clear message, when the
//! verbs transport is actually selected.
//!
//! Symbols are looked up by plain name: glibc's `dlsym` returns the default (`@@`)
//! version, i.e. `ibv_modify_qp@@IBVERBS_1.1` rather than the 1.0 compat entry point
//! (a test checks this against `dlvsym`).

use super::types::*;
use crate::error::VerbsError;
use libc::{c_char, c_int, c_uint, c_void};
use std::ffi::OsStr;

/// File names tried, in order: the runtime package's soname, then the dev symlink.
pub(crate) const LIBRARY_NAMES: [&str; 2] = ["libibverbs.so.1", "libibverbs.so"];

macro_rules! verbs_functions {
    ($($name:ident: fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// The exported libibverbs functions this crate calls, resolved once.
        pub(crate) struct Libibverbs {
            $(pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
            /// Keeps the library mapped for as long as the function pointers live.
            _library: libloading::Library,
        }

        impl Libibverbs {
            /// Loads the library at `path` (a file name searched on the loader path, or a path).
            pub(crate) fn load_from(path: impl AsRef<OsStr>) -> Result<Self, VerbsError> {
                let path = path.as_ref();
                // SAFETY: libibverbs' initialisers only set up its own state.
                let library = unsafe { libloading::Library::new(path) }.map_err(|e| VerbsError::LibraryMissing {
                    library: path.to_string_lossy().into_owned(),
                    reason: loader_message(&e),
                })?;
                // SAFETY: each symbol is declared with its prototype from verbs.h.
                unsafe {
                    Ok(Self {
                        $($name: *library
                            .get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(concat!(stringify!($name), "\0").as_bytes())
                            .map_err(|e| VerbsError::MissingSymbol { symbol: stringify!($name), reason: loader_message(&e) })?,)*
                        _library: library,
                    })
                }
            }
        }
    };
}

/// The loader's own words (`dlerror()`), which libloading keeps as the error's source.
fn loader_message(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(detail) => detail.to_string(),
        None => e.to_string(),
    }
}

verbs_functions! {
    ibv_get_device_list: fn(*mut c_int) -> *mut *mut ibv_device;
    ibv_free_device_list: fn(*mut *mut ibv_device);
    ibv_get_device_name: fn(*mut ibv_device) -> *const c_char;
    ibv_open_device: fn(*mut ibv_device) -> *mut ibv_context;
    ibv_close_device: fn(*mut ibv_context) -> c_int;
    ibv_query_device: fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
    ibv_query_port: fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
    ibv_query_gid: fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    ibv_alloc_pd: fn(*mut ibv_context) -> *mut ibv_pd;
    ibv_dealloc_pd: fn(*mut ibv_pd) -> c_int;
    ibv_reg_mr: fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
    ibv_dereg_mr: fn(*mut ibv_mr) -> c_int;
    ibv_create_comp_channel: fn(*mut ibv_context) -> *mut ibv_comp_channel;
    ibv_destroy_comp_channel: fn(*mut ibv_comp_channel) -> c_int;
    ibv_create_cq: fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
    ibv_destroy_cq: fn(*mut ibv_cq) -> c_int;
    ibv_get_cq_event: fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
    ibv_ack_cq_events: fn(*mut ibv_cq, c_uint);
    ibv_create_qp: fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    ibv_modify_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    ibv_destroy_qp: fn(*mut ibv_qp) -> c_int;
    ibv_create_ah: fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
    ibv_destroy_ah: fn(*mut ibv_ah) -> c_int;
    ibv_wc_status_str: fn(u32) -> *const c_char;
}

impl Libibverbs {
    /// Loads the system libibverbs ([`LIBRARY_NAMES`]).
    pub(crate) fn load() -> Result<Self, VerbsError> {
        let mut reasons = Vec::new();
        for name in LIBRARY_NAMES {
            match Self::load_from(name) {
                Ok(lib) => return Ok(lib),
                Err(VerbsError::LibraryMissing { reason, .. }) => reasons.push(reason),
                Err(other) => return Err(other),
            }
        }
        Err(VerbsError::LibraryMissing {
            library: LIBRARY_NAMES.join(" or "),
            reason: reasons.join("; "),
        })
    }

    /// `ibv_wc_status_str`: the provider-independent name of a completion status.
    pub(crate) fn status_str(&self, status: u32) -> String {
        // SAFETY: returns a pointer to a static string (or "unknown") for any value.
        let s = unsafe { (self.ibv_wc_status_str)(status) };
        if s.is_null() {
            return format!("status {status}");
        }
        // SAFETY: non-null, NUL-terminated static string.
        unsafe { std::ffi::CStr::from_ptr(s) }
            .to_string_lossy()
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_itself_and_the_package() {
        let err = Libibverbs::load_from("/nonexistent/libibverbs.so.1")
            .err()
            .unwrap();
        let msg = err.to_string();
        assert!(
            msg.starts_with(
                "RDMA verbs unavailable: cannot load libibverbs (/nonexistent/libibverbs.so.1): "
            ),
            "{msg}"
        );
        assert!(msg.contains("No such file or directory"), "{msg}");
        assert!(
            msg.ends_with("install the libibverbs1 (rdma-core) package or use the udp transport"),
            "{msg}"
        );
    }

    #[test]
    fn a_library_without_the_verbs_names_the_missing_symbol() {
        let err = Libibverbs::load_from("libc.so.6").err().unwrap();
        assert_eq!(
            err.to_string().split(" (").next().unwrap(),
            "libibverbs is too old: symbol ibv_get_device_list is missing"
        );
    }

    #[test]
    fn the_real_library_loads_and_names_statuses() {
        let lib = Libibverbs::load().expect("libibverbs1 must be installed for the tests (apt-get install libibverbs-dev rdma-core ibverbs-providers)");
        assert_eq!(lib.status_str(0), "success");
        assert_eq!(lib.status_str(5), "Work Request Flushed Error");
    }

    #[test]
    fn plain_dlsym_resolves_the_default_symbol_versions() {
        let lib = Libibverbs::load().unwrap();
        // SAFETY: dlopen of an already-loaded library only bumps its reference count.
        let handle = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW) };
        assert!(!handle.is_null());
        let versioned = |name: &std::ffi::CStr, version: &std::ffi::CStr| {
            // SAFETY: valid handle and NUL-terminated names.
            unsafe { libc::dlvsym(handle, name.as_ptr(), version.as_ptr()) as usize }
        };
        assert_eq!(
            lib.ibv_modify_qp as usize,
            versioned(c"ibv_modify_qp", c"IBVERBS_1.1")
        );
        assert_ne!(
            lib.ibv_modify_qp as usize,
            versioned(c"ibv_modify_qp", c"IBVERBS_1.0")
        );
        assert_eq!(
            lib.ibv_create_qp as usize,
            versioned(c"ibv_create_qp", c"IBVERBS_1.1")
        );
        assert_eq!(
            lib.ibv_get_device_list as usize,
            versioned(c"ibv_get_device_list", c"IBVERBS_1.1")
        );
        assert_eq!(
            lib.ibv_create_comp_channel as usize,
            versioned(c"ibv_create_comp_channel", c"IBVERBS_1.0")
        );
        // SAFETY: balances the dlopen above.
        unsafe { libc::dlclose(handle) };
    }
}
