-- Reserved for another part of issue 30 (numbers were handed out in advance);
-- drop this file when the real 0018 lands.
SELECT 1;
