// The groups a pipeline rank's hidden states and their gradients travel
// over: one two-member group for each directed edge between neighbouring
// stages, around the ring (interleaved schedules send the last rank's hidden
// states on to the first).
//
// One group per edge and direction keeps a rank's sends and receives on
// different groups. Over NCCL that is what keeps the schedule from deadlocking:
// a group runs its work in order on one stream and a send waits for its
// receiver, so a receive queued behind this rank's pending send would wait
// for the peer's receive, while the peer waits for this rank's next send.
// Over Gloo the edges cost a few more connections and change nothing.
#ifndef GLM_PARALLEL_PIPELINE_EDGES_H_
#define GLM_PARALLEL_PIPELINE_EDGES_H_

#include <array>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/collectives.h"
#include "kernels/device_memory.h"
#include "parallel/staged_collectives.h"

namespace glm {

// A group and the peer's rank in it (not owned).
struct PipelineLink {
  Collectives* group = nullptr;
  int peer = 0;
};

// Where a pp rank's hidden states go (the next stage) and come from (the
// previous), and where their gradients go and come from.
struct PipelineLinks {
  int size = 1;  // pp
  int rank = 0;  // this rank's pp rank
  PipelineLink to_next, from_previous, to_previous, from_next;
};

class PipelineEdges {
 public:
  // Connects pp rank `rank`'s four edges (global ranks `members`, in pp
  // order, at least two) by `connect`: each a group of two, the sender
  // member 0, keyed by its direction and global ranks. Every rank connects
  // its edges in one order of all edges (direction, sender, receiver), so
  // each edge's two members reach it with every earlier edge of theirs
  // done: none waits on another.
  static absl::StatusOr<std::unique_ptr<PipelineEdges>> Connect(
      const std::vector<int>& members, int rank,
      const CollectivesFactory& connect);

  // The links over the connected groups (owned here), which take buffers in
  // their own place.
  PipelineLinks Links() const;

 private:
  enum Edge { kToNext, kFromPrevious, kToPrevious, kFromNext, kEdges };

  PipelineEdges(int size, int rank) : size_(size), rank_(rank) {}

  int size_, rank_;
  std::array<std::unique_ptr<Collectives>, kEdges> groups_;
};

// Views of a rank's links for buffers on the host or on a device: each
// distinct group of the links gets its GroupViews (parallel/
// staged_collectives.h), so a group that takes the other place's buffers is
// reached through copies, and a device's queued work finishes before a
// group reads its buffers.
class PipelineLinkViews {
 public:
  PipelineLinkViews() = default;
  // `links`' groups (not owned) and `device` (not owned; null: none).
  PipelineLinkViews(const PipelineLinks& links, Allocator* device);

  // The links for buffers on the device (or the host).
  PipelineLinks For(bool on_device) const;

 private:
  PipelineLinks links_;
  std::map<Collectives*, std::unique_ptr<GroupViews>> views_;
};

}  // namespace glm

#endif  // GLM_PARALLEL_PIPELINE_EDGES_H_
