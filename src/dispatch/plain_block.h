// Between the hook (dispatch_hook.cpp) and the plain-eager blocks and the iteration marker
// (plain_block.cpp): what the hook asks of them on the owner thread.
#pragma once

namespace hotpath::detail {

// Whether a block ended since the last call (the hook is back): the sink is told with this op.
bool take_plain_return();
// Ends the calling thread's block, if it runs one (no on_end); whether it did. The hook's key
// is left as it is.
bool stop_plain_count();
// The marker's key follows the hook's pauses (a Pause hides the loop's ops from both).
void pause_marks(bool paused);
// Takes the marker's key out of the calling thread's dispatch (detaching).
void unmark_current_thread();
// Registers the marker key's fallthrough (once; where the key is free), when a thread attaches:
// it rebuilds every operator's dispatch table, milliseconds that the loop's first plain block
// would otherwise pay.
void prepare_marks();
// Drops the marker's kernels (with the hook's fallback, when the last thread detaches).
void release_marks();

}  // namespace hotpath::detail
