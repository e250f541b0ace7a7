// Reading and writing user-named files safely: special files refused before they are opened, whole-file
// reads with named errors, and outputs written atomically with every write and the close checked.
//
//   encore::check_readable_file(path, "model weights");   // throws InputError: FIFO, directory, symlink loop, ...
//   std::string text = encore::read_text_file(path, "training data");
//   encore::write_file_atomically("out.json", [&](std::ostream& os) { os << "{}"; });
//
// Thread-safe (no shared state).
#pragma once
#include <functional>
#include <iosfwd>
#include <string>

namespace encore {

// Throws encore::InputError naming `what` and `path` unless path is a regular file we can open for reading:
// a FIFO (open() would block), a device, a socket, a directory, a missing path, a symlink loop and a
// permission error are all refused with a message saying which. Runs stat(), never open().
// allow_pipe: a FIFO is accepted (text inputs read once, e.g. `-i <(zcat texts.gz)`); model files never are.
void check_readable_file(const std::string& path, const char* what, bool allow_pipe = false);

// check_readable_file, then the whole file; read errors name the file.
std::string read_text_file(const std::string& path, const char* what);

// Writes `path` through a temporary file next to it (".<name>.tmp-XXXXXX") and renames it over `path`, so an
// existing file is never left half-written. Every write, the flush and the close are checked; on any failure
// (including an exception from `write`) the temporary file is removed and encore::ResourceError (disk,
// permissions) or the exception is thrown. A `path` that is a directory is refused before anything is written.
// A symbolic link is followed: the file it names is replaced and the link kept. A `path` that exists and is not a
// regular file (a device such as /dev/null, a FIFO) is written in place, as the user asked (it cannot be replaced
// atomically, and replacing it with a file would lose what it is); a socket is refused. A path naming an open
// descriptor (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N) is written through that descriptor, at its
// offset (a shell's >> appends, and what the script wrote there before stays).
void write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);
// Whether `path` is a stream write_file_atomically cannot seek back in: a descriptor path (its offset is the
// shell's, not 0) or a FIFO. Output that rewrites its start (an .npy header, with its row count) cannot go there.
// A device (/dev/null) is not one; a terminal fails such a seek when it is made.
bool is_stream_output(const std::string& path);

}  // namespace encore
