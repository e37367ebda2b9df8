//! A SQLite VFS that hands a commit's WAL frames to the kernel in one
//! `pwrite` instead of two per page.
//!
//! SQLite appends each WAL frame as two writes, its 24-byte header and then
//! the page, so a batch that dirties 100 pages makes 200 `pwrite` calls, most
//! of them straddling a kernel page boundary. In the echo benchmark that was
//! about a third of the group-commit writer's time. This VFS wraps the
//! platform's default one and, for WAL files only, collects writes that
//! continue one another in memory. The collected bytes go to the file, in
//! one write, before any other call on the file: above all the sync that
//! ends every commit, before SQLite publishes the commit's frames to other
//! connections through the WAL index; also reads (SQLite rereading a frame
//! of its own transaction), size queries, truncation and close. A write that
//! does not continue the collected bytes (SQLite rewriting a frame of the
//! same transaction), or more than [`MAX_PENDING`] bytes, flushes first.
//!
//! That holds only for a connection that syncs the WAL at every commit
//! (`synchronous=FULL` or `EXTRA`): with `NORMAL`, SQLite would publish
//! frames that are still in this process's memory. The store's write
//! connection, the one connection opened with this VFS, runs with `FULL`
//! (and a test checks both).
//!
//! A write error therefore surfaces at the sync instead of at the `xWrite`
//! call; SQLite treats both alike (the transaction fails and its frames are
//! never published). Every file that is not a WAL goes straight to the
//! default VFS.
//!
//! The wrapper keeps SQLite's file object of the default VFS at the start of
//! its own, so the default VFS's methods are called on the same pointer; the
//! state of this layer follows it at [`Layout::extra_offset`].

use std::ffi::{CStr, c_int, c_void};
use std::ptr;
use std::sync::OnceLock;

use rusqlite::ffi;

/// The VFS's registered name, for `Connection::open_with_flags_and_vfs`.
pub(crate) const NAME: &str = "toolgate-wal";
const NAME_C: &CStr = c"toolgate-wal";

/// Bytes collected before they are written without waiting for a sync
/// point: a batch of large results still goes out in a few writes, and the
/// memory held stays bounded.
const MAX_PENDING: usize = 4 << 20;

/// Bytes per write handed to the default VFS, which writes at most
/// 128 KiB - 1 per call (it masks the count to 17 bits): 124 KiB.
const WRITE_CHUNK: usize = 124 << 10;

/// Capacity kept between commits; a larger buffer (after a batch of large
/// results) is released.
const KEEP_CAPACITY: usize = 1 << 20;

/// Where this layer's state sits in SQLite's file object, and the default
/// VFS it wraps.
struct Layout {
    inner: *mut ffi::sqlite3_vfs,
    extra_offset: usize,
}

// SAFETY: the pointer is to the default VFS, which SQLite keeps registered
// for the life of the process and only reads.
unsafe impl Send for Layout {}
unsafe impl Sync for Layout {}

static LAYOUT: OnceLock<Result<Layout, c_int>> = OnceLock::new();

/// Register the VFS (once per process); later calls return the first
/// outcome.
pub(crate) fn register() -> Result<(), rusqlite::Error> {
    let outcome = LAYOUT.get_or_init(|| {
        // SAFETY: sqlite3_vfs_find initialises the library if needed and
        // returns the default VFS, which stays registered.
        let inner = unsafe { ffi::sqlite3_vfs_find(ptr::null()) };
        if inner.is_null() {
            return Err(ffi::SQLITE_ERROR);
        }
        // SAFETY: `inner` is a valid VFS; it is copied, not modified.
        let mut vfs: ffi::sqlite3_vfs = unsafe { ptr::read(inner) };
        let inner_size = usize::try_from(vfs.szOsFile).map_err(|_| ffi::SQLITE_ERROR)?;
        let align = std::mem::align_of::<Extra>();
        let extra_offset = inner_size.div_ceil(align) * align;
        vfs.szOsFile = c_int::try_from(extra_offset + std::mem::size_of::<Extra>())
            .map_err(|_| ffi::SQLITE_ERROR)?;
        vfs.zName = NAME_C.as_ptr();
        vfs.pNext = ptr::null_mut();
        vfs.pAppData = ptr::null_mut();
        // Every other method of the default VFS ignores the VFS it is called
        // on (it only reads mxPathname, copied above), so it is kept as is.
        vfs.xOpen = Some(open);
        let vfs = Box::leak(Box::new(vfs));
        // SAFETY: `vfs` lives for the rest of the process.
        let rc = unsafe { ffi::sqlite3_vfs_register(vfs, 0) };
        if rc != ffi::SQLITE_OK {
            return Err(rc);
        }
        Ok(Layout {
            inner,
            extra_offset,
        })
    });
    match outcome {
        Ok(_) => Ok(()),
        Err(rc) => Err(rusqlite::Error::SqliteFailure(
            ffi::Error::new(*rc),
            Some("registering the WAL-buffering VFS".into()),
        )),
    }
}

fn layout() -> &'static Layout {
    match LAYOUT.get() {
        Some(Ok(layout)) => layout,
        // `open` is only reachable through the registered VFS.
        _ => unreachable!("the WAL VFS is used before it was registered"),
    }
}

/// This layer's state of one open WAL file.
struct Extra {
    /// The default VFS's methods for the file.
    inner: *const ffi::sqlite3_io_methods,
    /// File offset of `pending[0]`.
    start: i64,
    /// Bytes written by SQLite and not yet by the kernel.
    pending: Vec<u8>,
}

/// Where a file object's [`Extra`] lives.
///
/// # Safety
/// `file` was allocated by SQLite with this VFS's `szOsFile`.
unsafe fn extra_ptr(file: *mut ffi::sqlite3_file) -> *mut Extra {
    // SAFETY: the offset is within the allocation, by the contract.
    unsafe { file.cast::<u8>().add(layout().extra_offset).cast::<Extra>() }
}

/// # Safety
/// `file` is a file object opened by [`open`] as a WAL file and not closed.
unsafe fn extra<'a>(file: *mut ffi::sqlite3_file) -> &'a mut Extra {
    // SAFETY: by the caller's contract the extra state was written there
    // by `open`; SQLite uses a file object from one thread at a time.
    unsafe { &mut *extra_ptr(file) }
}

/// # Safety
/// As for [`extra`].
unsafe fn inner<'a>(file: *mut ffi::sqlite3_file) -> &'a ffi::sqlite3_io_methods {
    // SAFETY: the default VFS's method table is static.
    unsafe { &*extra(file).inner }
}

/// Write the collected bytes, if any, through the default VFS.
///
/// # Safety
/// As for [`extra`].
unsafe fn flush(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: per the contract.
    let state = unsafe { extra(file) };
    if state.pending.is_empty() {
        return ffi::SQLITE_OK;
    }
    // SAFETY: the default VFS's method table is static (read through the
    // state already borrowed, not a second borrow of it).
    let Some(write) = (unsafe { &*state.inner }).xWrite else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    let mut rc = ffi::SQLITE_OK;
    let mut offset = state.start;
    for chunk in state.pending.chunks(WRITE_CHUNK) {
        // SAFETY: the file is open; the chunk outlives the call and its
        // length fits a c_int.
        rc = unsafe { write(file, chunk.as_ptr().cast(), chunk.len() as c_int, offset) };
        if rc != ffi::SQLITE_OK {
            break;
        }
        offset += chunk.len() as i64;
    }
    // Kept or not, the bytes are settled: on failure the transaction fails
    // and SQLite never publishes its frames.
    state.pending.clear();
    if state.pending.capacity() > KEEP_CAPACITY {
        state.pending.shrink_to(KEEP_CAPACITY);
    }
    rc
}

unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let layout = layout();
    // SAFETY: SQLite allocated `file` with this VFS's szOsFile, which holds
    // the default VFS's file object at its start.
    let rc = unsafe {
        match (*layout.inner).xOpen {
            Some(open) => open(layout.inner, name, file, flags, out_flags),
            None => ffi::SQLITE_CANTOPEN,
        }
    };
    if rc != ffi::SQLITE_OK || flags & ffi::SQLITE_OPEN_WAL == 0 {
        return rc;
    }
    // SAFETY: the default VFS opened the file and set its methods; the
    // extra state's place is within the allocation and uninitialised.
    unsafe {
        let state = Extra {
            inner: (*file).pMethods,
            start: 0,
            pending: Vec::new(),
        };
        ptr::write(extra_ptr(file), state);
        (*file).pMethods = &METHODS;
    }
    rc
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a file once; the state is read out and dropped.
    unsafe {
        let flushed = flush(file);
        let methods = inner(file);
        drop(ptr::read(extra_ptr(file)));
        let closed = match methods.xClose {
            Some(close) => close(file),
            None => ffi::SQLITE_OK,
        };
        if flushed != ffi::SQLITE_OK {
            flushed
        } else {
            closed
        }
    }
}

unsafe extern "C" fn write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: ffi::sqlite3_int64,
) -> c_int {
    let Ok(len) = usize::try_from(amount) else {
        return ffi::SQLITE_IOERR_WRITE;
    };
    // SAFETY: a WAL file opened by `open`; SQLite passes `amount` readable
    // bytes at `data`.
    unsafe {
        let state = extra(file);
        let end = state.start + state.pending.len() as i64;
        let continues = !state.pending.is_empty() && offset == end;
        if !continues || state.pending.len() + len > MAX_PENDING {
            let rc = flush(file);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
        }
        // After a flush the buffer is empty and starts at this write.
        let state = extra(file);
        if state.pending.is_empty() {
            state.start = offset;
        }
        state
            .pending
            .extend_from_slice(std::slice::from_raw_parts(data.cast::<u8>(), len));
    }
    ffi::SQLITE_OK
}

/// Flush, then call the default VFS's method; the methods below differ only
/// in their arguments.
macro_rules! flushing {
    ($name:ident, $method:ident, ($($arg:ident: $ty:ty),*)) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: a WAL file opened by `open`; the arguments are SQLite's.
            unsafe {
                let rc = flush(file);
                if rc != ffi::SQLITE_OK {
                    return rc;
                }
                match inner(file).$method {
                    Some(method) => method(file $(, $arg)*),
                    None => ffi::SQLITE_IOERR,
                }
            }
        }
    };
}

flushing!(read, xRead, (data: *mut c_void, amount: c_int, offset: ffi::sqlite3_int64));
flushing!(truncate, xTruncate, (size: ffi::sqlite3_int64));
flushing!(sync, xSync, (flags: c_int));
flushing!(file_size, xFileSize, (size: *mut ffi::sqlite3_int64));
flushing!(lock, xLock, (level: c_int));
flushing!(unlock, xUnlock, (level: c_int));
flushing!(check_reserved_lock, xCheckReservedLock, (out: *mut c_int));
flushing!(file_control, xFileControl, (op: c_int, arg: *mut c_void));
flushing!(shm_map, xShmMap, (region: c_int, size: c_int, extend: c_int, out: *mut *mut c_void));
flushing!(shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int));
flushing!(shm_unmap, xShmUnmap, (delete: c_int));
flushing!(fetch, xFetch, (offset: ffi::sqlite3_int64, amount: c_int, out: *mut *mut c_void));
flushing!(unfetch, xUnfetch, (offset: ffi::sqlite3_int64, page: *mut c_void));

unsafe extern "C" fn sector_size(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: a WAL file opened by `open`.
    unsafe { inner(file).xSectorSize.map_or(4096, |method| method(file)) }
}

unsafe extern "C" fn device_characteristics(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: a WAL file opened by `open`.
    unsafe {
        inner(file)
            .xDeviceCharacteristics
            .map_or(0, |method| method(file))
    }
}

unsafe extern "C" fn shm_barrier(file: *mut ffi::sqlite3_file) {
    // SAFETY: a WAL file opened by `open`. SQLite keeps the WAL index on the
    // database file, so this is never called on a WAL; it delegates for
    // completeness.
    unsafe {
        if let Some(method) = inner(file).xShmBarrier {
            method(file);
        }
    }
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: Some(shm_map),
    xShmLock: Some(shm_lock),
    xShmBarrier: Some(shm_barrier),
    xShmUnmap: Some(shm_unmap),
    xFetch: Some(fetch),
    xUnfetch: Some(unfetch),
};

/// The name of the VFS a connection's main database was opened with.
#[cfg(test)]
pub(crate) fn vfs_of(conn: &rusqlite::Connection) -> Option<String> {
    let mut vfs: *mut ffi::sqlite3_vfs = ptr::null_mut();
    // SAFETY: the handle is open; the file control writes one pointer.
    let rc = unsafe {
        ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            ffi::SQLITE_FCNTL_VFS_POINTER,
            (&raw mut vfs).cast(),
        )
    };
    if rc != ffi::SQLITE_OK || vfs.is_null() {
        return None;
    }
    // SAFETY: a registered VFS's name is a static C string.
    let name: *const std::ffi::c_char = unsafe { (*vfs).zName };
    Some(
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use rusqlite::{Connection, OpenFlags, params};

    use super::*;

    fn open_buffered(path: &std::path::Path) -> Connection {
        register().unwrap();
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE;
        let conn = Connection::open_with_flags_and_vfs(path, flags, NAME).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        conn.pragma_update(None, "synchronous", "FULL").unwrap();
        conn.pragma_update(None, "wal_autocheckpoint", 0).unwrap();
        conn
    }

    fn rows(conn: &Connection) -> Vec<(i64, String)> {
        let mut stmt = conn.prepare("SELECT k, v FROM t ORDER BY k").unwrap();
        stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// What a crash right after a commit leaves: the database and WAL files
    /// as they are on disk, opened by the default VFS.
    fn on_disk(path: &std::path::Path, dir: &tempfile::TempDir) -> Connection {
        let copy = dir.path().join("copy.db");
        std::fs::copy(path, &copy).unwrap();
        let wal = |p: &std::path::Path| {
            p.with_file_name(format!("{}-wal", p.file_name().unwrap().to_str().unwrap()))
        };
        std::fs::copy(wal(path), wal(&copy)).unwrap();
        Connection::open(&copy).unwrap()
    }

    #[test]
    fn a_connection_opened_with_it_uses_it_and_others_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.db");
        let buffered = open_buffered(&path);
        assert_eq!(vfs_of(&buffered).as_deref(), Some(NAME));
        let plain = Connection::open(&path).unwrap();
        assert_ne!(vfs_of(&plain).as_deref(), Some(NAME));
    }

    /// Every committed transaction is on disk when the commit returns, and
    /// other connections (default VFS) read exactly what was committed,
    /// including transactions that spilled pages to the WAL before their
    /// commit, rewrote them, or rolled back after spilling.
    #[test]
    fn commits_are_on_disk_and_readable_when_they_return() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.db");
        let mut writer = open_buffered(&path);
        // A small cache: large transactions spill pages before commit.
        writer.pragma_update(None, "cache_size", 20).unwrap();
        writer
            .execute_batch("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
            .unwrap();
        let reader = Connection::open(&path).unwrap();
        let mut expected: Vec<(i64, String)> = Vec::new();

        for round in 0..30_i64 {
            let tx = writer.transaction().unwrap();
            // Alternately small and large (hundreds of pages) transactions.
            let n = if round % 3 == 2 { 400 } else { 5 };
            for i in 0..n {
                let k = round * 1000 + i;
                let v = format!("{round}-{i}-{}", "x".repeat(if n > 5 { 900 } else { 10 }));
                tx.execute("INSERT INTO t (k, v) VALUES (?1, ?2)", params![k, v])
                    .unwrap();
                expected.push((k, v));
            }
            if n > 5 {
                // Touch the spilled pages again in the same transaction.
                tx.execute(
                    "UPDATE t SET v = v || '!' WHERE k >= ?1",
                    params![round * 1000],
                )
                .unwrap();
                for (k, v) in expected.iter_mut() {
                    if *k >= round * 1000 {
                        v.push('!');
                    }
                }
            }
            tx.commit().unwrap();
            assert_eq!(rows(&reader), expected, "round {round}, read live");

            // A large transaction that spills, then rolls back.
            let tx = writer.transaction().unwrap();
            for i in 0..300 {
                tx.execute(
                    "INSERT INTO t (k, v) VALUES (?1, ?2)",
                    params![round * 1000 + 500 + i, "y".repeat(900)],
                )
                .unwrap();
            }
            tx.rollback().unwrap();
        }
        assert_eq!(rows(&reader), expected);

        let copy = on_disk(&path, &dir);
        assert_eq!(rows(&copy), expected, "on disk after the last commit");
        let check: String = copy
            .query_row("PRAGMA integrity_check", [], |row| row.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }
}
