# Writes OUT, C source holding the fatbin IN as a constant array of 64-bit
# words (aligned as the driver wants an image), by the toolkit's bin2c.
execute_process(
  COMMAND ${BIN2C} --const --static --name cuarrow_gather_fatbin_image --type longlong ${IN}
  OUTPUT_FILE ${OUT}.tmp
  RESULT_VARIABLE failed)
if(failed)
  message(FATAL_ERROR "bin2c failed on ${IN}")
endif()
file(RENAME ${OUT}.tmp ${OUT})
