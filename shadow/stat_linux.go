package shadow

import "syscall"

type syscallStat = syscall.Stat_t
