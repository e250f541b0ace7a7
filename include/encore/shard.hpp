// encore::Shard - splitting a batch-embedding job over independent workers (Slurm array tasks, Kubernetes indexed
// jobs) and resuming one that was killed, the library side of `encore embed --shard I/N --resume`.
//
//   encore::Shard s = encore::Shard::parse("1/4");                    // the second of four shards
//   encore::RecordRange r = encore::shard_records(n, /*block=*/1024, s);   // records [r.begin, r.end)
//   int64_t next = encore::resume_jsonl("out.1.jsonl", r, 1024);      // where an interrupted run stopped
//   encore::BlockAppender out("out.1.jsonl");                         // lines appended, fsynced per block
//
// The rule. Records are numbered 0..n-1 in input order and cut into blocks of `block` consecutive records (the
// last may be shorter). A job encodes one block at a time: texts are sorted by length and batched only within a
// block, so a record's vector depends on its block alone, never on which shard or run computed it. Shard I of N
// takes the contiguous run of blocks [floor(I*B/N), floor((I+1)*B/N)) of the B = ceil(n/block) blocks: every
// shard is within one block of the others' size, and shards 0..N-1 in order cover 0..n-1 exactly once, so their
// outputs concatenated in shard order (`cat out.0.jsonl out.1.jsonl ...`) are the bytes one unsharded run with
// the same block writes.
//
// Resume. A JSONL output is one line per record, `{"index": i, ...}` with the record's global index, appended
// a block at a time and fsynced after each block. After a kill the file holds whole blocks, possibly followed by
// part of one (whole lines, then maybe a torn last line). resume_jsonl keeps the longest prefix of whole blocks,
// truncates the rest, and returns the index to continue from; continuing there re-encodes exactly the blocks
// an uninterrupted run would have, so the resumed file is byte-identical to an uninterrupted run's.
#pragma once
#include <cstdint>
#include <string>

namespace encore {

struct Shard {
  int64_t index = 0, count = 1;  // 0 <= index < count
  // "I/N" with 0 <= I < N (e.g. "0/4" .. "3/4"); throws encore::Error naming the spec otherwise.
  static Shard parse(const std::string& spec);
};

struct RecordRange {
  int64_t begin = 0, end = 0;  // records [begin, end)
  int64_t size() const { return end - begin; }
};

// Shard s's records of n records cut into blocks of `block` (>= 1): see the rule above. begin is a multiple of
// `block`; a shard may be empty when there are fewer blocks than shards.
RecordRange shard_records(int64_t n, int64_t block, const Shard& s);

// For a JSONL file being written for records `range` in blocks of `block` (boundaries at multiples of `block`
// from record 0, and range.end): checks that every whole line starts with {"index": i for i = range.begin,
// range.begin+1, ..., truncates the file after its last whole block (dropping a torn last line and a partial
// block), and returns the index to continue from (range.begin for a missing or empty file, range.end for a
// finished one). Throws encore::Error naming the file and line when a line is not one encore writes or its
// index is not the one expected (another shard's or another job's output).
int64_t resume_jsonl(const std::string& path, const RecordRange& range, int64_t block);

// Appends bytes to a file and makes them durable at block boundaries. Not thread-safe.
class BlockAppender {
 public:
  // truncate: start the file empty; else append to what is there (after resume_jsonl).
  explicit BlockAppender(const std::string& path, bool truncate = false);
  ~BlockAppender();
  BlockAppender(const BlockAppender&) = delete;
  BlockAppender& operator=(const BlockAppender&) = delete;
  void append(const std::string& bytes);  // written with write(2) (retried on short writes)
  void sync();                            // fsync: everything appended so far survives a kill or a crash
  // sync() then close(2), each checked (a network filesystem may report a failed write only at close). The
  // destructor closes without checking: call close() when the output is complete.
  void close();

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace encore
