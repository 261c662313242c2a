//! The process allocator: mimalloc, except that very large allocations are
//! made with `mmap(MAP_NORESERVE)`.
//!
//! Why mimalloc rather than glibc's malloc: request frames and record
//! buffers are 100 KiB to 1 MiB each, and glibc either mmaps every one
//! (256 page faults, zeroing and a munmap per MiB: a tenth of the broker's
//! time producing) or, with its adaptive threshold, serves them from a heap
//! that fragments and is never trimmed (`make bench` once saw 1.4 GiB RSS
//! after producing 20 GiB). mimalloc keeps freed large blocks in its
//! segments for reuse and returns unused ones to the system after a short
//! delay, so both the faults and the growth go.
//!
//! Why: kafka-protocol's decoders size a Vec from an array length read off
//! the wire (`Vec::with_capacity(n)`) before reading the elements. A frame of
//! a few bytes claiming 2^31 elements would ask for hundreds of GiB; the
//! system allocator refuses, and Rust aborts the process on a failed
//! allocation, which no `catch_unwind` can stop. With MAP_NORESERVE the kernel
//! hands out address space without reserving memory; only the pages the
//! decoder really writes are backed, and it fails (and frees the mapping) as
//! soon as the frame runs out of bytes. A frame is at most
//! `limits::REQUEST_BYTES_MAX`, which bounds what can really be touched.
//! Found by `net/tests/bad_input.rs` (random frames).

use std::alloc::{GlobalAlloc, Layout};

use mimalloc::MiMalloc as Small;

/// Allocations at least this large bypass mimalloc.
const LARGE_BYTES_MIN: usize = 1 << 30;

pub struct GuardedAlloc;

unsafe impl GlobalAlloc for GuardedAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() < LARGE_BYTES_MIN || layout.align() > page_size() {
            return unsafe { Small.alloc(layout) };
        }
        // SAFETY: an anonymous private mapping; no file, no fixed address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            p.cast()
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() < LARGE_BYTES_MIN || layout.align() > page_size() {
            return unsafe { Small.dealloc(ptr, layout) };
        }
        // SAFETY: `ptr` came from the mmap above with this very size.
        unsafe { libc::munmap(ptr.cast(), layout.size()) };
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let small_before = layout.size() < LARGE_BYTES_MIN || layout.align() > page_size();
        let small_after = new_size < LARGE_BYTES_MIN || layout.align() > page_size();
        if small_before && small_after {
            return unsafe { Small.realloc(ptr, layout, new_size) };
        }
        // Crossing the threshold: allocate, copy, free (GlobalAlloc's default).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        let new_ptr = unsafe { self.alloc(new_layout) };
        if !new_ptr.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new_ptr, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new_ptr
    }
}

fn page_size() -> usize {
    4096
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_capacity_is_address_space_not_memory() {
        let layout = Layout::from_size_align(200 << 30, 8).unwrap();
        let a = GuardedAlloc;
        let p = unsafe { a.alloc(layout) };
        assert!(!p.is_null(), "200 GiB of address space");
        unsafe {
            p.write(7);
            assert_eq!(p.read(), 7);
            a.dealloc(p, layout);
        }
    }
}
