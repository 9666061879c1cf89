// eagle-train: trains EAGLE speculative-decoding draft heads. Everything lives in eagle_core.
#include "eagle/cli/commands.h"

int main(int argc, char** argv) { return eagle::cli::main(argc, argv); }
