package routes

import "os"

// readFile is os.ReadFile, a variable so tests need not depend on the
// machine's sysctl.
var readFile = os.ReadFile
