// The forward mutant catalogue at double: the forward whose central
// differences are a mutant's gradient (fd.hpp). One source, catalogue.cpp.
#define DMREF_MUTANT_F double
#include "catalogue.cpp"
