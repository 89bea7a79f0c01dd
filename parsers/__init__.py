"""Pure file -> frame readers (no torch). Importing the package sets the text columns' storage
(forensics.core.model: one shared object per distinct text, not a copy a row)."""
import forensics.core.model  # noqa: F401
