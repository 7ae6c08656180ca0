//! The C library's own functions, found past this library (`dlsym(RTLD_NEXT)`): what every call
//! on a descriptor that is not upgraded goes to.

use std::sync::OnceLock;

/// Looks `name` (NUL-terminated) up once and keeps it.
pub(crate) fn next(cell: &OnceLock<usize>, name: &'static str) -> usize {
    *cell.get_or_init(|| {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name only reads the loader's tables.
        let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
        assert!(f != 0, "iwarp-preload: the C library has no {name}");
        f
    })
}

/// `real!(name: fn(args) -> ret)`: the C library's `name`, as a function pointer of that type.
macro_rules! real {
    ($name:ident : $ty:ty) => {{
        static CELL: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let f = $crate::real::next(&CELL, concat!(stringify!($name), "\0"));
        // SAFETY: the symbol of that name in the C library has this C signature.
        #[allow(unused_unsafe)]
        let f = unsafe { std::mem::transmute::<usize, $ty>(f) };
        f
    }};
}
pub(crate) use real;
