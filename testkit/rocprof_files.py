"""rocprofv3's CSV files as the reader tests and the fuzz tests write them: the header of a
``<pid>_kernel_trace.csv``."""

from __future__ import annotations

# the columns up to the kernel's end (what the reader reads), then the dispatch's geometry
KERNEL_TRACE_TIMES = [
    "Kind",
    "Agent_Id",
    "Queue_Id",
    "Stream_Id",
    "Thread_Id",
    "Dispatch_Id",
    "Kernel_Id",
    "Kernel_Name",
    "Correlation_Id",
    "Start_Timestamp",
    "End_Timestamp",
]
KERNEL_TRACE_COLUMNS = [
    *KERNEL_TRACE_TIMES,
    "Private_Segment_Size",
    "Group_Segment_Size",
    "Workgroup_Size_X",
    "Workgroup_Size_Y",
    "Workgroup_Size_Z",
    "Grid_Size_X",
    "Grid_Size_Y",
    "Grid_Size_Z",
]
