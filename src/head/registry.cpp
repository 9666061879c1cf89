// The draft table (see draft_spec.h): every kind's row, the one file that names them all.
#include <fmt/format.h>

#include "eagle/head/dflash/spec.h"
#include "eagle/head/dflash2/spec.h"
#include "eagle/head/draft_spec.h"
#include "eagle/head/dspark/spec.h"
#include "eagle/head/eagle/spec.h"
#include "eagle/head/mtp/spec.h"
#include "eagle/util/error.h"

namespace eagle::head {

const std::vector<DraftSpec>& draft_specs() {
  static const std::vector<DraftSpec> rows{eagle3_spec(), eagle1_spec(), mtp_spec(),
                                           dflash_spec(), dspark_spec(), dflash2_spec()};
  return rows;
}

const DraftSpec& draft_spec(DraftKind kind) {
  for (const auto& row : draft_specs())
    if (row.kind == kind) return row;
  throw Error(ErrorKind::internal, "a draft kind without a row in the draft table")
      .found(fmt::format("{}", static_cast<int>(kind)));
}

}  // namespace eagle::head
